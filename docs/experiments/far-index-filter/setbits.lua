-- sets the filter's bits for the filled ids of hashes from..to (per each)
local per = tonumber(ARGV[1])
local from, to = tonumber(ARGV[2]), tonumber(ARGV[3])
local ops = {}
for h = from, to do
  for i = 1, per do
    local s = redis.sha1hex('bench-0:f' .. h .. '-' .. i)
    for k = 0, 2 do
      ops[#ops + 1] = 'SET'; ops[#ops + 1] = 'u1'
      ops[#ops + 1] = tonumber(string.sub(s, 5 + k * 7, 11 + k * 7), 16) % 134217728
      ops[#ops + 1] = 1
    end
  end
end
redis.call('BITFIELD', 'dq:{b:0}:farbloom', unpack(ops))
return 1

-- a Bloom filter of the far ids in one string (2^27 bits, 3 probes from the id's SHA-1): one
-- BITFIELD of every probe of the call, then a HEXISTS only for the ids it may hold
local n, base = tonumber(ARGV[1]), ARGV[2]
local ops, members = {}, {}
for i = 1, n do
  local m = 'bench-0:' .. base .. i
  local h = redis.sha1hex(m)
  members[i] = m
  for k = 0, 2 do
    ops[#ops + 1] = 'GET'
    ops[#ops + 1] = 'u1'
    ops[#ops + 1] = tonumber(string.sub(h, 5 + k * 7, 11 + k * 7), 16) % 134217728
  end
end
local bits = redis.call('BITFIELD_RO', 'dq:{b:0}:farbloom', unpack(ops))
local found = 0
for i = 1, n do
  if bits[3 * i - 2] == 1 and bits[3 * i - 1] == 1 and bits[3 * i] == 1 then
    local m = members[i]
    local idx = 'dq:{b:0}:fx:' .. (tonumber(string.sub(redis.sha1hex(m), 1, 4), 16) % 32768)
    found = found + redis.call('HEXISTS', idx, m)
  end
end
return found

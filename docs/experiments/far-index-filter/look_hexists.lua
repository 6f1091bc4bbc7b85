-- today's lookup: a HEXISTS on each id's index hash (ids new: none found)
local n, base = tonumber(ARGV[1]), ARGV[2]
local found = 0
for i = 1, n do
  local m = 'bench-0:' .. base .. i
  local idx = 'dq:{b:0}:fx:' .. (tonumber(string.sub(redis.sha1hex(m), 1, 4), 16) % 32768)
  found = found + redis.call('HEXISTS', idx, m)
end
return found

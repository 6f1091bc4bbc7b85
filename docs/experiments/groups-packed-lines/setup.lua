-- Fills a redis-server in the shape of the bench with `--groups 10000` after its promotion:
-- 100,000 envelopes of 200 bytes in `jobs`, and 10,000 groups with 9 parked jobs each, both as
-- a list per group (`gq:t:<group>`, dq's layout) and as one field per group of one hash
-- (`gline:t`, the ids joined by commas: the layout measured against it).
local env = string.rep('x', 200)
for i = 1, 100000 do redis.call('HSET', 'jobs', 't:j' .. i, env) end
for g = 1, 10000 do
  local ids, packed = {}, {}
  for k = 1, 9 do ids[k] = 'j' .. (g + k * 10000) end
  redis.call('RPUSH', 'gq:t:g' .. g, unpack(ids))
  redis.call('HSET', 'gline:t', 'g' .. g, table.concat(ids, ','))
end
return 'ok'

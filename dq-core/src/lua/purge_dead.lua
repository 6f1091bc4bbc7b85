-- purge_dead: deletes a topic's dead letters that died before a time, a bounded batch.
-- KEYS[1] jobs  KEYS[2] dead:<topic>
-- ARGV[1] before (us since the epoch)  ARGV[2] most jobs (at most 10000)
-- Returns the number deleted; call again until it returns less than the limit.
local jobs, dead = KEYS[1], KEYS[2]
local old = redis.call('ZRANGEBYSCORE', dead, '-inf', '(' .. ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, member in ipairs(old) do
  redis.call('HDEL', jobs, member)
  redis.call('ZREM', dead, member)
end
return #old

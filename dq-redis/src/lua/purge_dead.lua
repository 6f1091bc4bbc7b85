-- purge_dead: deletes a topic's dead letters that died before a time, a bounded batch.
-- KEYS[1] jobs  KEYS[2] dead:<topic>  KEYS[3] unique_for
-- ARGV[1] before (us since the epoch)  ARGV[2] most jobs (at most 1000)
-- Returns the number deleted; call again until it returns less than the limit.
-- One HDEL and one ZREM (each may delete its key, and neither key is used after it).
local jobs, dead = KEYS[1], KEYS[2]
local limit = math.min(tonumber(ARGV[2]), 1000)
local old = redis.call('ZRANGEBYSCORE', dead, '-inf', '(' .. ARGV[1], 'LIMIT', 0, limit)
if #old == 0 then return 0 end
redis.call('HDEL', jobs, unpack(old))
redis.call('ZREM', dead, unpack(old))
redis.call('HDEL', KEYS[3], unpack(old))
return #old

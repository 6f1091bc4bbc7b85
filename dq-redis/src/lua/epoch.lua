-- epoch: names this namespace's records in Redis: made (from Redis' clock) when first asked, the
-- same from then on, and gone with them when Redis loses them (restarted without persistence,
-- flushed, failed over to a replica that never had them). Runtimes compare it to the one they
-- saw when they declared their listeners' schedules and retries, and declare them again.
-- KEYS[1] meta (shard 0)
-- Returns the epoch.
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if epoch then return epoch end
epoch = fmt(now_us())
redis.call('HSET', KEYS[1], 'epoch', epoch)
return epoch

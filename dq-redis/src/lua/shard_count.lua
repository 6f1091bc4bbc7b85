-- shard_count: the number of shards the namespace's jobs are spread over, recorded in shard 0
-- by the first process that uses the namespace; every process must hash with it, or jobs of
-- the shards it does not know are stranded (pushed where no worker looks).
-- KEYS[1] meta (shard 0)  ARGV[1] this process's count (recorded when there is none)
-- Returns the recorded count.
local recorded = redis.call('HGET', KEYS[1], 'shards')
if recorded then return tonumber(recorded) end
redis.call('HSET', KEYS[1], 'shards', ARGV[1])
return tonumber(ARGV[1])

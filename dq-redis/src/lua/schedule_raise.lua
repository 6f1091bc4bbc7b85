-- schedule_raise: moves a schedule to a new generation above ARGV[2], if it still exists. Its
-- generation went back (a failover lost its latest change, or Redis' clock stepped back) below
-- the one its ticks were made under in some shard, whose fence would refuse all its ticks.
-- KEYS[1] schedules  KEYS[2] schedule_next  KEYS[3] schedule_gen
-- ARGV[1] schedule id  ARGV[2] the generation to go above
-- Returns the new generation, or 0 when there is no such schedule.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('ZSCORE', KEYS[2], ARGV[1]) -- read before the first write, as every script
local old = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or 0)
local gen = math.max(old + 1, now_us(), tonumber(ARGV[2]) + 1)
redis.call('HSET', KEYS[3], ARGV[1], fmt(gen))
return gen

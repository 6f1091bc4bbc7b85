-- schedule_put: stores a schedule, new or changed, and starts its next generation (the tick
-- fences of the old one no longer hold its ticks back, and a look still firing the old spec
-- can no longer move it: schedule_advance checks the generation).
-- KEYS[1] schedules  KEYS[2] schedule_next  KEYS[3] schedule_gen
-- ARGV[1] schedule id  ARGV[2] spec (JSON)  ARGV[3] next tick (us), or '' for paused
-- Returns the new generation: above the old one, and Redis' clock (us) unless the clock went
-- back, so one removed and declared again also starts above every generation it had.
local gen = math.max(tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or 0) + 1, now_us())
redis.call('HSET', KEYS[3], ARGV[1], fmt(gen))
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
end
return gen

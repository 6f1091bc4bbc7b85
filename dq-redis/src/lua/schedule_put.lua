-- schedule_put: stores a schedule, new or changed, and starts its next generation (the tick
-- fences of the old one no longer hold its ticks back, and a look still firing the old spec
-- can no longer move it: schedule_advance checks the generation).
-- KEYS[1] schedules  KEYS[2] schedule_next  KEYS[3] schedule_gen
-- ARGV[1] schedule id  ARGV[2] spec (JSON)  ARGV[3] next tick (us), or '' for paused
-- Returns the new generation.
-- Every key is read before the first write (a slot that migrates aborts a script at a key
-- its node lacks; it must abort before it wrote anything).
redis.call('HEXISTS', KEYS[1], ARGV[1])
redis.call('ZSCORE', KEYS[2], ARGV[1])
local gen = new_generation(KEYS[3], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
set_next(KEYS[2], ARGV[1], ARGV[3])
return gen

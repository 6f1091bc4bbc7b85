-- schedule_advance: moves a schedule's next tick on, if no other process did it first and its
-- spec did not change meanwhile.
-- KEYS[1] schedule_next  KEYS[2] schedule_last  KEYS[3] schedule_gen
-- ARGV[1] schedule id  ARGV[2] the tick fired (us)  ARGV[3] the next tick (us), or '' for none
-- ARGV[4] the schedule's generation the tick was fired under
-- Returns 1 when moved, 0 when the next tick was no longer ARGV[2] (fired elsewhere, paused,
-- removed) or the generation is no longer ARGV[4] (changed or resumed).
local next_tick = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not next_tick or tonumber(next_tick) ~= tonumber(ARGV[2]) then return 0 end
if tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or 0) ~= tonumber(ARGV[4]) then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
set_next(KEYS[1], ARGV[1], ARGV[3])
return 1

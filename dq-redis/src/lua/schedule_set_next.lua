-- schedule_set_next: pauses a schedule (no next tick) or resumes it (a next tick, in a new
-- generation, as schedule_put), if it still exists: checked in the same step, so a schedule
-- removed meanwhile is not left with a next tick and no spec.
-- KEYS[1] schedules  KEYS[2] schedule_next  KEYS[3] schedule_gen
-- ARGV[1] schedule id  ARGV[2] next tick (us), or '' to pause
-- Returns 1 when set, 0 when there is no such schedule.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('ZSCORE', KEYS[2], ARGV[1]) -- read before the first write, as every script
if ARGV[2] ~= '' then new_generation(KEYS[3], ARGV[1]) end
set_next(KEYS[2], ARGV[1], ARGV[2])
return 1

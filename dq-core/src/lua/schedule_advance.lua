-- schedule_advance: moves a schedule's next tick on, if no other process did it first.
-- KEYS[1] schedule_next  KEYS[2] schedule_last
-- ARGV[1] schedule id  ARGV[2] the tick fired (us)  ARGV[3] the next tick (us), or '' for none
-- Returns 1 when moved, 0 when the next tick was no longer ARGV[2] (fired elsewhere, paused,
-- removed or changed).
local next_tick = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not next_tick or tonumber(next_tick) ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
return 1

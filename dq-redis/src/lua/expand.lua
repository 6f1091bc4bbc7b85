-- expand: moves jobs stored compact (far jobs: lib.lua) into `jobs` and `delayed`, with their
-- exact due times, whenever they are due: the layout every release reads, for a rollback to a
-- release before far jobs (OPERATIONS.md). The parts due soonest first, at most two a call
-- (2,000 jobs), as the mover moves them; the caller calls again while parts are left.
-- KEYS[1] jobs  KEYS[2] delayed
-- ARGV[1] key prefix
-- Returns {jobs moved, parts left}. Counts do not change (a far job counts as delayed
-- already), but for the jobs far_due dead-letters (lib.lua): they go from delayed to dead.
-- A job moved earlier than the earliest one of `delayed` is announced on `wake`, as a push
-- announces it, so that a mover of any release comes for it in time.
local jobs, delayed, prefix = KEYS[1], KEYS[2], ARGV[1]
local plan = far_due(prefix, now_us(), 2, true)
-- (none: no part left, or on a cluster another process moved the parts this call was given:
-- lib.lua's far_due; the caller calls again while parts are left)
if not plan then return {0, redis.call('ZCARD', prefix .. 'far')} end
local before = earliest(delayed)
redis.call('EXISTS', jobs) -- touched before the first write
local left = redis.call('ZCARD', prefix .. 'far') - #plan.parts
far_move(plan, jobs, delayed)
announce_first(prefix, plan.first, before)
return {plan.moved, left}

-- group_concurrency: sets (or clears: ARGV[3] '') how many jobs of each group of a topic hold a
-- slot at once (lib.lua's groups), and lets in the parked jobs a higher limit makes room for:
-- the first of each group's line, last in the topic's ready lanes. O(groups with jobs parked):
-- an operator's call, not a hot path.
-- KEYS[1] limits  KEYS[2] counts  KEYS[3] jobs (named for its slot: read for the priorities of
--   the jobs let in)
-- ARGV[1] key prefix  ARGV[2] topic  ARGV[3] the limit (at least 1), or '' for the default of 1
-- Returns how many parked jobs were let in.
local limits, counts = KEYS[1], KEYS[2]
local prefix, topic, limit = ARGV[1], ARGV[2], ARGV[3]
local field = topic .. ':group_concurrency'
local n = limit == '' and 1 or tonumber(limit)
local k = group_keys(prefix, topic)
-- Reads first: every group with jobs parked, the slots it holds, its next jobs.
local waiting = redis.call('ZRANGE', k.waiting, 0, -1)
local held = slots_held(k, waiting)
local plan = leave_plan(k, {})
redis.call('EXISTS', limits, counts, k.active, k.parked) -- touched before the first write
local wants = {}
for x, g in ipairs(waiting) do wants[x] = {g, held[g]} end
plan_nexts(plan, wants, n)
if limit == '' then
  redis.call('HDEL', limits, field)
else
  redis.call('HSET', limits, field, limit)
end
if #plan.pops > 0 then write_leave(plan, counts) end
return #plan.admit

-- group_concurrency: sets (or clears: ARGV[3] '') how many jobs of each group of a topic hold a
-- slot at once (lib.lua's groups), and lets in the parked jobs a higher limit makes room for:
-- the first of each group's line, last in the topic's ready lanes. O(groups with jobs parked):
-- an operator's call, not a hot path.
-- KEYS[1] limits  KEYS[2] counts  KEYS[3] jobs (read for the priorities of the jobs let in)
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
local plan = { k = k, leaving = {}, held = {}, admit = {}, levels = {}, trims = {}, active = {} }
redis.call('EXISTS', limits, k.active, k.parked)
for _, g in ipairs(waiting) do
  local next_ids, taken = next_parked(k, g, n - held[g])
  for _, id in ipairs(next_ids) do
    plan.admit[#plan.admit + 1] = id
    push_all_pairs(plan.active, id, g)
  end
  if #next_ids > 0 then plan.held[g] = held[g] + #next_ids end
  if taken > 0 then plan.trims[#plan.trims + 1] = {g, taken, #next_ids} end
end
if #plan.admit > 0 then
  touch_lanes(prefix, topic)
  local members = {}
  for x, id in ipairs(plan.admit) do members[x] = topic .. ':' .. id end
  for x, raw in ipairs(redis.call('HMGET', KEYS[3], unpack(members))) do
    plan.levels[x] = priority_of(raw)
  end
end
if limit == '' then
  redis.call('HDEL', limits, field)
else
  redis.call('HSET', limits, field, limit)
end
if #plan.admit > 0 or #plan.trims > 0 then write_leave(plan, counts) end
return #plan.admit

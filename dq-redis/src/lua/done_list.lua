-- done_list: one page of a topic's kept succeeded jobs in one shard, newest first (read-only).
-- KEYS[1] jobs (a kept job's envelope stays there)  KEYS[2] done:<topic> (its order list
-- `done:<topic>:order` is named from it, lib.lua)
-- ARGV[1] rank to start at  ARGV[2] page size (at most 1000)
-- Returns {member_1, succeeded_at_us_1, envelope_1, value_1, ...} (value '' for none).
-- The order list is walked back from its newest call (each call's last head says how many
-- members come before it), leaving out the records that are no longer the ones a call kept:
-- O(rank + page), bounded by the records the retention keeps.
local jobs, done = KEYS[1], KEYS[2]
local order = record_keys(done)
local offset, size = tonumber(ARGV[1]), math.min(tonumber(ARGV[2]), 1000)
local out, skipped, taken = {}, 0, 0
local at_end = -1
while taken < size do
  local head = redis.call('LINDEX', order, at_end)
  if not head then break end
  local at, n = order_head(head)
  if not at then break end -- not a head: a list of another layout
  local members = n > 0 and redis.call('LRANGE', order, at_end - n, at_end - 1) or {}
  local still = still_kept(at, members,
    #members > 0 and redis.call('HMGET', done, unpack(members)) or {})
  for k = #still, 1, -1 do
    if skipped < offset then
      skipped = skipped + 1
    elseif taken < size then
      local member = still[k]
      local _, value = record_parts(redis.call('HGET', done, member))
      out[#out + 1] = member
      out[#out + 1] = at
      out[#out + 1] = redis.call('HGET', jobs, member) or ''
      out[#out + 1] = value
      taken = taken + 1
    end
  end
  at_end = at_end - n - 2
end
return out

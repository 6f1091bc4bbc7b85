-- done_list: one page of a topic's kept succeeded jobs in one shard, newest first (read-only).
-- KEYS[1] jobs (a kept job's envelope stays there)  KEYS[2] done:<topic> (its order list
-- `done:<topic>:order` is named from it, lib.lua)
-- ARGV[1] rank to start at  ARGV[2] page size (at most 1000)
-- Returns {member_1, succeeded_at_us_1, envelope_1, value_1, ...} (value '' for none).
-- The order list is walked from its newest call, skipping whole calls before the rank by their
-- size and leaving out the records that are no longer the ones a call kept: bounded by the
-- records the retention keeps.
local jobs, done = KEYS[1], KEYS[2]
local order = done .. ':order'
local offset, size = tonumber(ARGV[1]), math.min(tonumber(ARGV[2]), 1000)
local out, skipped, taken = {}, 0, 0
local calls = redis.call('LLEN', order)
for i = calls - 1, 0, -1 do
  if taken >= size then break end
  local entry = redis.call('LINDEX', order, i)
  local at, n = order_head(entry)
  local members = order_members(entry)
  local current = #members > 0 and redis.call('HMGET', done, unpack(members)) or {}
  for k = #members, 1, -1 do
    local rec = current[k]
    if rec and string.sub(rec, 1, #at + 1) == at .. ':' then
      if skipped < offset then
        skipped = skipped + 1
      elseif taken < size then
        local _, value = record_parts(rec)
        out[#out + 1] = members[k]
        out[#out + 1] = at
        out[#out + 1] = redis.call('HGET', jobs, members[k]) or ''
        out[#out + 1] = value
        taken = taken + 1
      end
    end
  end
end
return out

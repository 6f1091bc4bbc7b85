-- forget_done: deletes the kept records of a topic that keeps none any more (its retention was
-- taken away), an ack call's worth at a time (at most 1000), and with the last its order list
-- and its marks of cancelled jobs. One step per call's worth: a record's envelope lives in
-- `jobs`, where a push of the same id writes the new job's (and takes the record out of
-- `done:<topic>`), so the records are checked and deleted in the same step.
-- KEYS[1] jobs  KEYS[2] done:<topic> (and `done:<topic>:order`, lib.lua)  KEYS[3] cancelled:<topic>
-- Returns the number of records deleted, -1 when nothing is left.
local jobs, done = KEYS[1], KEYS[2]
local order = done .. ':order'
local entry = redis.call('LINDEX', order, 0)
redis.call('EXISTS', jobs, done, KEYS[3]) -- touched before the first write
if not entry then
  redis.call('DEL', done, KEYS[3])
  return -1
end
local at = order_head(entry)
local members = order_members(entry)
local current = #members > 0 and redis.call('HMGET', done, unpack(members)) or {}
local still = {}
for i, member in ipairs(members) do
  local rec = current[i]
  if rec and string.sub(rec, 1, #at + 1) == at .. ':' then still[#still + 1] = member end
end
redis.call('LPOP', order)
if #still > 0 then
  redis.call('HDEL', done, unpack(still))
  redis.call('HDEL', jobs, unpack(still))
end
return #still

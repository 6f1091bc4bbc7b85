-- forget_done: deletes the kept records of a topic that keeps none any more (its retention was
-- taken away), an ack call's worth at a time (at most 1000), and with the last its order list,
-- its counts of records taken out and its marks of cancelled jobs. One step per call's worth: a
-- record's envelope lives in `jobs`, where a push of the same id writes the new job's (and
-- takes the record out of `done:<topic>`), so the records are checked and deleted in the same
-- step.
-- KEYS[1] jobs  KEYS[2] done:<topic> (and `done:<topic>:order` and `done:<topic>:taken`,
-- lib.lua)  KEYS[3] cancelled:<topic>
-- Returns the number of records deleted, -1 when nothing is left.
local jobs, done = KEYS[1], KEYS[2]
local order, taken = record_keys(done)
local head = redis.call('LINDEX', order, 0)
redis.call('EXISTS', jobs, done, KEYS[3], taken) -- touched before the first write
if not head then
  redis.call('DEL', done, KEYS[3], taken)
  return -1
end
local at, n = order_head(head)
if not at then
  -- Not a head (a list of another layout): it goes.
  redis.call('LPOP', order)
  return 0
end
local members = n > 0 and redis.call('LRANGE', order, 1, n) or {}
local still, not_ours = still_kept(at, members,
  #members > 0 and redis.call('HMGET', done, unpack(members)) or {})
local untaken = {}
count_down(taken, not_ours, untaken)
redis.call('LTRIM', order, n + 2, -1)
write_untaken(taken, untaken)
if #still > 0 then
  redis.call('HDEL', done, unpack(still))
  redis.call('HDEL', jobs, unpack(still))
end
return #still

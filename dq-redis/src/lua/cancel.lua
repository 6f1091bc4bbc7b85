-- cancel: deletes a job that has not started (delayed or ready) or a dead letter.
-- KEYS[1] jobs  KEYS[2] delayed  KEYS[3] inflight  KEYS[4] counts  KEYS[5] ready:<topic>
-- KEYS[6] dead:<topic>  KEYS[7] gen:<topic> (declared for a cluster's reshard: see push.lua)
-- KEYS[8] unique_for (a cancelled job reserves nothing: its entry goes)
-- KEYS[9] done:<topic>: a kept succeeded job's record (its envelope in `jobs`, its time and
-- value in `done:<topic>`) is deleted by a cancel of its id (its order entry stays: lib.lua)  KEYS[10] retain: a
-- job deleted here is announced on `ended`, for the waits for it (cancelled in a topic that keeps
-- its ends, not kept in another)
-- KEYS[11] leases  KEYS[12] cancels: a running job is not deleted here; the cancel is recorded
-- against its lease (member -> token) and announced on the shard's `wake` channel as
-- `cancel <topic:id>`, for its worker to stop it (it deletes the job with cancel_running.lua
-- unless the run succeeds; the heartbeat reads `cancels` should the announcement be lost)
-- KEYS[13] events  KEYS[14] events:<topic>: when the topic's job events are on, a job deleted
-- here (not started, or dead) is announced (`cancelled`, with the runs it made)
-- KEYS[15] cancelled:<topic>: a job deleted here of a topic that keeps its ends is marked
-- cancelled there, within the retention, for the waits that come after
-- ARGV[1] key prefix  ARGV[2] topic  ARGV[3] id  ARGV[4] 'far' where far jobs may be (lib.lua)
-- Returns 1 cancelled (or a kept record deleted), 0 not found, 3 running (its worker was asked
-- to stop it), 2 running with no lease token (left alone; not expected).
-- A ready job's entry stays in its list, made stale (lib.lua): O(1) however long the list. A
-- job of a group (lib.lua's groups) gives the slot it holds back, and its group lets its next
-- job in; one that waited for a slot (parked) leaves its group's line. A job of a workflow
-- step, or a blocked step (which has no job yet), ends its step, cancelled, and its dependents
-- follow their policies (lib.lua's workflows). A far job (lib.lua) is found through its index.
local jobs, delayed, inflight, counts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, topic, id = ARGV[1], ARGV[2], ARGV[3]
local member = topic .. ':' .. id
if redis.call('HEXISTS', jobs, member) == 0 then
  -- A far job (lib.lua): its element goes blank and its index entry goes. It has not run.
  local far = ARGV[4] == 'far' and far_where(prefix, member, topic)
  if far then
    redis.call('EXISTS', far.part, counts, KEYS[8]) -- touched before the first write
    local spec = redis.call('HGET', KEYS[10], topic)
    if spec then redis.call('EXISTS', KEYS[15]) end
    local stream
    for _, cap in pairs(events_on(KEYS[13], {topic})) do stream = events_open(KEYS[14], cap) end
    far_blank(far)
    bump(counts, topic, 'delayed', -1)
    redis.call('HDEL', KEYS[8], member)
    if spec then bury(KEYS[15], member, spec, now_us()) end
    redis.call('PUBLISH', prefix .. 'ended', member)
    if stream then emit_event(stream, 'cancelled', id, 0, fmt(now_us())) end
    far_unindex(far)
    return 1
  end
  -- A blocked workflow step (no job yet): it ends cancelled, and its dependents follow.
  local workflow = workflow_plan(prefix, {{member, 'c', ''}})
  if not workflow then return 0 end
  workflow_write(workflow, now_us())
  workflow_finish(workflow, now_us())
  return 1
end
if redis.call('ZSCORE', inflight, member) then
  local token = redis.call('HGET', KEYS[11], member)
  if not token then return 2 end
  redis.call('HEXISTS', KEYS[12], member) -- touched before the first write
  redis.call('HSET', KEYS[12], member, token)
  redis.call('PUBLISH', prefix .. 'wake', 'cancel ' .. member)
  return 3
end
if not redis.call('ZSCORE', delayed, member)
  and not redis.call('ZSCORE', prefix .. 'dead:' .. topic, member) then
  -- Not waiting: a kept record, or a ready job.
  if redis.call('HEXISTS', KEYS[9], member) == 1 then
    local _, taken = record_keys(KEYS[9])
    redis.call('EXISTS', taken) -- touched before the first write
    redis.call('HDEL', KEYS[9], member)
    redis.call('HDEL', jobs, member)
    take_records(taken, {member})
    return 1
  end
end
local spec = redis.call('HGET', KEYS[10], topic)
local marked = spec ~= false
if marked then redis.call('EXISTS', KEYS[15]) end -- touched before the first write
local stream, runs
for _, cap in pairs(events_on(KEYS[13], {topic})) do
  stream = events_open(KEYS[14], cap)
  runs = runs_of(redis.call('HGET', jobs, member))
end
-- Groups: a parked job's group, or the plan of the slot it gives back, read before the first
-- write.
local gk = group_keys(prefix, topic)
local parked = redis.call('ZSCORE', gk.parked, id)
-- Its group, from its envelope (false for one that cannot be read: it leaves the parked set,
-- and its entry stays in a list this call cannot name, dropped when its group pops it: lib.lua's
-- `pop_nexts`).
local parked_in = parked and (group_of(redis.call('HGET', jobs, member)) or false)
local parked_gone = parked and {{id, parked_in}}
if parked then touch_parked(gk, parked_gone) end
local leave = not parked and plan_leave(prefix, topic, {id})
local workflow = workflow_plan(prefix, {{member, 'c', ''}})
workflow_write(workflow, now_us())
if redis.call('ZREM', delayed, member) == 1 then
  bump(counts, topic, 'delayed', -1)
elseif parked then
  unpark(gk, parked_gone)
elseif redis.call('ZREM', prefix .. 'dead:' .. topic, member) == 0 then
  invalidate(KEYS[7], counts, topic, id)
end
write_leave(leave, counts)
if parked then tidy_parked(gk, parked_gone) end
redis.call('HDEL', jobs, member)
redis.call('HDEL', KEYS[8], member)
if marked then bury(KEYS[15], member, spec, now_us()) end
redis.call('PUBLISH', prefix .. 'ended', member)
if stream then emit_event(stream, 'cancelled', id, runs, fmt(now_us())) end
workflow_finish(workflow, now_us())
return 1

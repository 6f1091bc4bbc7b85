-- cancel_running: deletes a running job the caller holds, whose cancel was requested (cancel.lua)
-- and whose run then ended without success: neither retried nor dead-lettered, nothing kept, no
-- run tallied (it neither succeeded nor failed).
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] counts  KEYS[4] leases  KEYS[5] cancels
-- KEYS[6] unique_for (a cancelled job reserves nothing: its entry goes)
-- KEYS[7] retain (the job is announced on `ended`, for the waits for it, which then find it
-- gone: cancelled in a topic that keeps its ends, not kept in another)  KEYS[8] progress (the run's progress goes)
-- KEYS[9] events  KEYS[10] events:<topic>: when the topic's job events are on, `cancelled` (with
-- the run) is announced  KEYS[11] cancelled:<topic> (a topic that keeps its ends marks the job
-- cancelled, within its retention, for the waits that come after)
-- ARGV[1] member  ARGV[2] token
-- A job of a group gives its slot back, and its group lets its next job in (lib.lua's groups).
-- A job of a workflow step ends its step, cancelled (lib.lua's workflows).
-- Returns 1, or 0 when the caller's lease was taken over (nothing changed).
local jobs, inflight, counts, leases, cancels = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local member, token = ARGV[1], ARGV[2]
if redis.call('HGET', leases, member) ~= token then return 0 end
local topic = topic_of(member)
local spec = redis.call('HGET', KEYS[7], topic)
local marked = spec ~= false
redis.call('EXISTS', jobs, inflight, counts, cancels, KEYS[6], KEYS[11]) -- touched before the first write
local reported = has_progress(KEYS[8])
local stream, run
for _, cap in pairs(events_on(KEYS[9], {topic})) do
  stream = events_open(KEYS[10], cap)
  run = runs_of(redis.call('HGET', jobs, member)) + 1
end
local leave = plan_leave(string.sub(jobs, 1, -5), topic, {string.sub(member, #topic + 2)})
local workflow = workflow_plan(string.sub(jobs, 1, -5), {{member, 'c', ''}})
proceed_when_full(leases) -- deleting a job must go through when Redis is full
workflow_write(workflow, now_us())
redis.call('HDEL', jobs, member)
redis.call('HDEL', cancels, member)
redis.call('HDEL', KEYS[6], member)
bump(counts, topic, 'inflight', -1)
end_leases(inflight, leases, {member})
write_leave(leave, counts)
if reported then clear_progress(KEYS[8], {member}) end
-- `jobs` is <prefix>jobs: the channel is <prefix>ended.
if marked then bury(KEYS[11], member, spec, now_us()) end
redis.call('PUBLISH', string.sub(jobs, 1, -5) .. 'ended', member)
if stream then
  emit_event(stream, 'cancelled', string.sub(member, #topic + 2), run, fmt(now_us()))
end
workflow_finish(workflow, now_us())
return 1

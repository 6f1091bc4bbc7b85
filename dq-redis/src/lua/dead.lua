-- dead: moves a job the caller holds to its topic's dead letters, counting the run and recording
-- the error that killed it. An envelope that cannot be read is kept whole as the payload.
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] counts  KEYS[4] dead:<topic>  KEYS[5] leases
-- (every dead letter is announced on `ended`, for the waits for it: dead letters are kept
-- whatever the retention)
-- KEYS[6] cancels (a cancel's request goes with the lease)  KEYS[7] progress
-- KEYS[8] events  KEYS[9] events:<topic>: when the topic's job events are on, `dead` (with the
-- error and the run) is announced
-- ARGV[1] member  ARGV[2] token  ARGV[3] error
-- A job of a group gives its slot back, and its group lets its next job in (lib.lua's groups).
-- A job of a workflow step ends its step, failed, and its dependents follow their policies
-- (lib.lua's workflows).
-- Returns 1, or 0 when the caller's lease was taken over (nothing changed), or 2 when a cancel
-- was requested against this very lease: nothing changed (retry.lua says why).
local jobs, inflight, counts, dead, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local member, token, err = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HGET', leases, member) ~= token then return 0 end
if redis.call('HGET', KEYS[6], member) == token then return 2 end
local now = now_us()
local raw = redis.call('HGET', jobs, member)
local e = parse(raw)
if e then
  e.attempt = e.attempt + 1
elseif raw then
  e = { attempt = 0, max = 0, created = now, due = now, payload = raw }
else
  return 0
end
if e.attempt > 0 then
  failed_run(e, err, e.attempt, now)
else
  e.err = err -- a malformed envelope, kept as the payload: no run of it to count
end
local topic = split_member(member)
local cancelled = redis.call('HEXISTS', KEYS[6], member) == 1
local reported = has_progress(KEYS[7])
local stream
for _, cap in pairs(events_on(KEYS[8], {topic})) do stream = events_open(KEYS[9], cap) end
local leave = plan_leave(string.sub(jobs, 1, -5), topic, {string.sub(member, #topic + 2)})
local workflow = workflow_plan(string.sub(jobs, 1, -5), {{member, 'f', err}})
proceed_when_full(leases) -- a dead letter must go through when Redis is full
workflow_write(workflow, now)
redis.call('HSET', jobs, member, encode(e))
end_leases(inflight, leases, {member})
bump(counts, topic, 'inflight', -1)
tally(counts, topic, 'failed', 1, now)
redis.call('ZADD', dead, now, member)
write_leave(leave, counts)
if cancelled then redis.call('HDEL', KEYS[6], member) end
redis.call('PUBLISH', string.sub(jobs, 1, -5) .. 'ended', member)
if reported then clear_progress(KEYS[7], {member}) end
if stream then
  emit_event(stream, 'dead', string.sub(member, #topic + 2), e.attempt, fmt(now), 'e', err)
end
workflow_finish(workflow, now)
return 1

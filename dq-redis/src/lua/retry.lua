-- retry: puts a failed job back to run again after a delay, counting the run and recording its
-- error; or (ARGV[6] = '0') a job its handler postponed (`Outcome::RetryAfter`), which neither
-- counts the run nor changes the last error.
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] delayed  KEYS[4] counts  KEYS[5] leases
-- KEYS[6] ready:<topic>  KEYS[7] gen:<topic> (declared for a cluster's reshard: see push.lua)
-- KEYS[12] ranked:<topic> (declared: a job with a priority goes back there, lib.lua)
-- KEYS[8] cancels (a cancel's request goes with the lease)
-- KEYS[9] progress (the run's progress goes: the next run starts without one)
-- KEYS[10] events  KEYS[11] events:<topic>: when the topic's job events are on, the run is
-- announced: `failed` (with its error) then `retrying` (with the due time), or `postponed`
-- ARGV[1] key prefix  ARGV[2] member  ARGV[3] token  ARGV[4] delay (us)  ARGV[5] error
-- ARGV[6] '1' when the run counts as an attempt, '0' when it was postponed
-- Returns 1, or 0 when the caller's lease was taken over (nothing changed), or 2 when a cancel
-- was requested against this very lease (cancel.lua): nothing changed, and the store deletes
-- the job as cancelled (cancel_running.lua), as README promises of a run that ends without
-- success after its cancel was asked, whether or not its worker had heard of it.
-- Reads first, writes after; the writes that may delete a key (ZREM inflight, HDEL progress)
-- come last.
local jobs, inflight, delayed, counts, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix, member, token, delay, err = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
if redis.call('HGET', leases, member) ~= token then return 0 end
if redis.call('HGET', KEYS[8], member) == token then return 2 end
local e = parse(redis.call('HGET', jobs, member))
if not e then return 0 end
local now = now_us()
local before = earliest(delayed)
local topic, id = split_member(member)
local cancelled = redis.call('HEXISTS', KEYS[8], member) == 1
local reported = has_progress(KEYS[9])
local stream
for _, cap in pairs(events_on(KEYS[10], {topic})) do stream = events_open(KEYS[11], cap) end
if now + delay <= now then touch_lanes(prefix, topic) end
proceed_when_full(leases) -- a retry must go through when Redis is full
if ARGV[6] ~= '0' then
  e.attempt = e.attempt + 1
  failed_run(e, err, e.attempt, now)
  tally(counts, topic, 'failed', 1, now)
end
e.due = now + delay
redis.call('HSET', jobs, member, encode(e))
place(prefix, delayed, counts, member, topic, id, e.due, now, e.priority)
bump(counts, topic, 'inflight', -1)
announce(prefix, delayed, before)
if cancelled then redis.call('HDEL', KEYS[8], member) end
end_leases(inflight, leases, {member})
if reported then clear_progress(KEYS[9], {member}) end
if stream then
  local stamp, due = fmt(now), fmt(e.due)
  if ARGV[6] ~= '0' then
    emit_event(stream, 'failed', id, e.attempt, stamp, 'e', err)
    emit_event(stream, 'retrying', id, e.attempt, stamp, 'd', due)
  else
    -- A postponed run is not counted: it is the one after those counted.
    emit_event(stream, 'postponed', id, e.attempt + 1, stamp, 'd', due)
  end
end
return 1

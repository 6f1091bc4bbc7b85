-- progress: records the progress a running job reported (JSON), replacing the one before, while
-- the caller holds its lease (the token in `leases`, as extend.lua checks it). status.lua reads
-- it; the scripts that end a lease (ack, retry, dead, release, reclaim) delete it.
-- KEYS[1] leases  KEYS[2] progress
-- KEYS[3] jobs  KEYS[4] events  KEYS[5] events:<topic>: when the topic's job events are on, the
-- report is announced (`progress`, with the value and the run, read from the envelope)
-- ARGV[1] member  ARGV[2] token  ARGV[3] the value (at most 64 KiB: the caller checks)
-- Returns 1, or 0 when the caller's lease is no longer held (nothing written).
-- Reads, then the write: not allowed when Redis is full (progress adds memory, and a run's
-- progress is not what keeps jobs moving).
local leases, progress = KEYS[1], KEYS[2]
local member, token = ARGV[1], ARGV[2]
if redis.call('HGET', leases, member) ~= token then return 0 end
local topic = topic_of(member)
local stream, run
for _, cap in pairs(events_on(KEYS[4], {topic})) do
  stream = events_open(KEYS[5], cap)
  run = runs_of(redis.call('HGET', KEYS[3], member)) + 1
end
redis.call('HSET', progress, member, ARGV[3])
if stream then
  emit_event(stream, 'progress', string.sub(member, #topic + 2), run, fmt(now_us()), 'v', ARGV[3])
end
return 1

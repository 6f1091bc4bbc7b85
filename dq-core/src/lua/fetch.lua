-- fetch: leases up to n ready jobs of one topic to the caller (the seed's LRANGE+LTRIM, made
-- crash-safe: each job is in the inflight set with a lease deadline before the script returns).
-- One lease token for the whole call, from the shard's counter: the envelopes are returned as
-- they are stored, not read or rewritten here (a crashed run is counted when its lease is
-- reclaimed; an envelope the caller cannot read, it dead-letters with the dead script).
-- Batched: one HMGET, one HSET and one ZADD for the whole batch.
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] ready:<topic>  KEYS[4] counts  KEYS[5] paused
-- KEYS[6] leases
-- ARGV[1] topic  ARGV[2] most jobs (at most 1000)  ARGV[3] lease length (us)
-- Returns {now_us, token, id_1, envelope_1, ...}, or {'paused'} when the topic is paused.
local jobs, inflight, ready, counts, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6]
local topic, n, lease_us = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('SISMEMBER', KEYS[5], topic) == 1 then return {'paused'} end
local ids = redis.call('LRANGE', ready, 0, n - 1)
if #ids == 0 then return {fmt(now_us()), '0'} end
redis.call('LTRIM', ready, #ids, -1)
local now = now_us()
-- ':next' cannot be a member: every member has a topic before its colon.
local token = fmt(redis.call('HINCRBY', leases, ':next', 1))
local out = {fmt(now), token}
local members = {}
for i, id in ipairs(ids) do members[i] = topic .. ':' .. id end
local raws = redis.call('HMGET', jobs, unpack(members))
local held, deadlines = {}, {}
local deadline = fmt(now + lease_us)
for i, id in ipairs(ids) do
  local raw = raws[i]
  -- An id without an envelope was cancelled while it waited: nothing to run.
  if raw then
    held[#held + 1] = members[i]
    held[#held + 1] = token
    deadlines[#deadlines + 1] = deadline
    deadlines[#deadlines + 1] = members[i]
    out[#out + 1] = id
    out[#out + 1] = raw
  end
end
if #held > 0 then
  redis.call('HSET', leases, unpack(held))
  redis.call('ZADD', inflight, unpack(deadlines))
  bump(counts, topic, 'inflight', #held / 2)
end
return out

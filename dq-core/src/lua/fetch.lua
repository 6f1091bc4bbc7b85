-- fetch: leases up to n ready jobs of one topic to the caller (the seed's LRANGE+LTRIM, made
-- crash-safe: each job is in the inflight set with a lease deadline before the script returns).
-- One lease token for the whole call, from the shard's counter and clock: the envelopes are returned as
-- they are stored, not read or rewritten here (a crashed run is counted when its lease is
-- reclaimed; an envelope the caller cannot read, it dead-letters with the dead script).
-- Batched: one HMGET, one HSET and one ZADD for the whole batch.
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] ready:<topic>  KEYS[4] counts  KEYS[5] paused
-- KEYS[6] leases  KEYS[7] gen:<topic>  KEYS[8] delayed
-- ARGV[1] topic  ARGV[2] most jobs (at most 1000)  ARGV[3] lease length (us)
-- Returns {now_us, token, id_1, envelope_1, ...}, or {'paused'} when the topic is paused.
-- Stale entries (lib.lua) are dropped on the way; when a whole batch was stale, the next one
-- is looked at, up to 10 batches, and a topic left with entries is announced again on the
-- `ready` channel so that its consumers come back at once.
local jobs, inflight, ready, counts, leases, gen = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7]
local topic, n, lease_us = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('SISMEMBER', KEYS[5], topic) == 1 then return {'paused'} end
local ids, stale = {}, 0
for _ = 1, 10 do
  local entries = redis.call('LRANGE', ready, 0, n - 1)
  if #entries == 0 then break end
  redis.call('LTRIM', ready, #entries, -1)
  local live, dropped, with_gen, stale_ids = live_entries(gen, entries)
  ids = live
  stale = stale + dropped
  -- A job whose live entry this is leaves the list (its stale entries were all before it):
  -- its generation is no longer needed. Nor is the generation of a job whose last stale entry
  -- this was, when it has no live entry either (cancelled, or moved to delayed).
  for _, id in ipairs(with_gen) do redis.call('HDEL', gen, id, id .. ':') end
  for _, id in ipairs(stale_ids) do
    if redis.call('HINCRBY', gen, id .. ':', -1) <= 0 then
      local member = topic .. ':' .. id
      if redis.call('HEXISTS', jobs, member) == 0 or redis.call('ZSCORE', KEYS[8], member) then
        redis.call('HDEL', gen, id, id .. ':')
      else
        redis.call('HDEL', gen, id .. ':')
      end
    end
  end
  if #ids > 0 then break end
end
if stale > 0 then
  bump(counts, topic, 'stale', -stale)
  if #ids == 0 and redis.call('LLEN', ready) > 0 then
    ring(string.sub(ready, 1, #ready - #topic - 6), topic)
  end
end
if #ids == 0 then return {fmt(now_us()), '0'} end
local now = now_us()
-- ':next' cannot be a member: every member has a topic before its colon. A token is never
-- below the shard's clock: a failover that rolls the counter back (the replica had not
-- received the last fetches) cannot hand a lost lease's token out again, as long as the new
-- master's clock is not behind the old one's by more than the failover took.
local token = fmt(math.max(tonumber(redis.call('HGET', leases, ':next') or '0') + 1, now))
redis.call('HSET', leases, ':next', token)
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

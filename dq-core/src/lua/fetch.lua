-- fetch: leases up to n ready jobs of one topic to the caller (the seed's LRANGE+LTRIM, made
-- crash-safe: each job is in the inflight set with a lease deadline before the script returns).
-- One lease token for the whole call, from the shard's counter: the envelopes are returned as
-- they are stored, not rewritten (a crashed run is counted when its lease is reclaimed).
-- Batched: one HMGET, one HSET and one ZADD for the whole batch.
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] ready:<topic>  KEYS[4] counts  KEYS[5] dead:<topic>
-- KEYS[6] paused  KEYS[7] leases
-- ARGV[1] topic  ARGV[2] most jobs (at most 1000)  ARGV[3] lease length (us)
-- Returns {now_us, token, id_1, envelope_1, ...}, or {'paused'} when the topic is paused. An
-- envelope that cannot be read is dead-lettered at once (the raw value kept as the payload) and
-- returned with its id prefixed by '!'.
local jobs, inflight, ready, counts, dead, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[7]
local topic, n, lease_us = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('SISMEMBER', KEYS[6], topic) == 1 then return {'paused'} end
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
  if raw then
    if readable(raw) then
      held[#held + 1] = members[i]
      held[#held + 1] = token
      deadlines[#deadlines + 1] = deadline
      deadlines[#deadlines + 1] = members[i]
      out[#out + 1] = id
      out[#out + 1] = raw
    else
      local env = encode({ attempt = 0, max = 0, created = now, due = now,
        err = 'malformed envelope found in Redis; the raw value is kept as the payload', payload = raw })
      redis.call('HSET', jobs, members[i], env)
      redis.call('ZADD', dead, now, members[i])
      out[#out + 1] = '!' .. id
      out[#out + 1] = env
    end
  end
end
if #held > 0 then
  redis.call('HSET', leases, unpack(held))
  redis.call('ZADD', inflight, unpack(deadlines))
  bump(counts, topic, 'inflight', #held / 2)
end
return out

-- fetch: leases up to n ready jobs of one topic to the caller (the seed's LRANGE+LTRIM, made
-- crash-safe: each job is in the inflight set with a lease deadline before the script returns).
-- Batched: one HMGET, one HSET and one ZADD for the whole batch.
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] ready:<topic>  KEYS[4] counts  KEYS[5] dead:<topic>
-- KEYS[6] paused
-- ARGV[1] topic  ARGV[2] most jobs (at most 1000)  ARGV[3] lease length (us)
-- Returns {now_us, id_1, envelope_1, ...}, or {'paused'} when the topic is paused. An envelope
-- that cannot be parsed is dead-lettered at once (the raw value kept as the payload) and
-- returned with its id prefixed by '!'.
local jobs, inflight, ready, counts, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local topic, n, lease_us = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('SISMEMBER', KEYS[6], topic) == 1 then return {'paused'} end
local ids = redis.call('LRANGE', ready, 0, n - 1)
if #ids == 0 then return {fmt(now_us())} end
redis.call('LTRIM', ready, #ids, -1)
local now = now_us()
local out = {fmt(now)}
local members = {}
for i, id in ipairs(ids) do members[i] = topic .. ':' .. id end
local raws = redis.call('HMGET', jobs, unpack(members))
local writes, leases = {}, {}
local deadline = fmt(now + lease_us)
for i, id in ipairs(ids) do
  local raw = raws[i]
  if raw then
    local env = bump_run(raw)
    if env then
      leases[#leases + 1] = deadline
      leases[#leases + 1] = members[i]
      out[#out + 1] = id
    else
      env = encode({ attempt = 0, max = 0, lease = 0, created = now, due = now,
        err = 'malformed envelope found in Redis; the raw value is kept as the payload', payload = raw })
      redis.call('ZADD', dead, now, members[i])
      out[#out + 1] = '!' .. id
    end
    writes[#writes + 1] = members[i]
    writes[#writes + 1] = env
    out[#out + 1] = env
  end
end
if #writes > 0 then redis.call('HSET', jobs, unpack(writes)) end
if #leases > 0 then
  redis.call('ZADD', inflight, unpack(leases))
  bump(counts, topic, 'inflight', #leases / 2)
end
return out

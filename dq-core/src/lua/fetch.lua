-- fetch: leases up to n ready jobs of one topic to the caller (the seed's LRANGE+LTRIM, made
-- crash-safe: each job is in the inflight set with a lease deadline before the script returns).
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] ready:<topic>  KEYS[4] counts  KEYS[5] dead:<topic>
-- ARGV[1] topic  ARGV[2] most jobs (at most 1000)  ARGV[3] lease length (us)
-- Returns {now_us, id_1, envelope_1, ...}. An envelope that cannot be parsed is dead-lettered at
-- once (the raw value kept as the payload) and returned with its id prefixed by '!'.
local jobs, inflight, ready, counts, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local topic, n, lease_us = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local ids = redis.call('LRANGE', ready, 0, n - 1)
local out = {0}
if #ids == 0 then
  out[1] = fmt(now_us())
  return out
end
redis.call('LTRIM', ready, #ids, -1)
local now = now_us()
out[1] = fmt(now)
local leased = 0
for _, id in ipairs(ids) do
  local member = topic .. ':' .. id
  local raw = redis.call('HGET', jobs, member)
  if raw then
    local e = parse(raw)
    if e then
      e.attempt = e.attempt + 1
      e.lease = e.lease + 1
      local env = encode(e)
      redis.call('HSET', jobs, member, env)
      redis.call('ZADD', inflight, now + lease_us, member)
      leased = leased + 1
      out[#out + 1] = id
      out[#out + 1] = env
    else
      local wrapped = encode({ attempt = 0, max = 0, lease = 0, created = now, due = now,
        err = 'malformed envelope found in Redis; the raw value is kept as the payload', payload = raw })
      redis.call('HSET', jobs, member, wrapped)
      redis.call('ZADD', dead, now, member)
      out[#out + 1] = '!' .. id
      out[#out + 1] = wrapped
    end
  end
end
bump(counts, topic, 'inflight', leased)
return out

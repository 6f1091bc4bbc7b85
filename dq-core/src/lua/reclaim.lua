-- reclaim: takes back jobs whose lease expired (their worker died or stalled), a bounded batch.
-- A job that was on its last attempt is dead-lettered, so a job that kills its worker every
-- time cannot loop forever.
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] counts
-- ARGV[1] key prefix  ARGV[2] most jobs (at most 10000)
-- Returns {requeued, dead_lettered}.
local jobs, inflight, counts = KEYS[1], KEYS[2], KEYS[3]
local prefix, limit = ARGV[1], tonumber(ARGV[2])
local now = now_us()
local expired = redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, limit)
local requeued, dead = 0, 0
-- Backwards, so that after the LPUSHes the job that expired first is first in line.
for i = #expired, 1, -1 do
  local member = expired[i]
  local topic, id = split_member(member)
  redis.call('ZREM', inflight, member)
  bump(counts, topic, 'inflight', -1)
  local raw = redis.call('HGET', jobs, member)
  local e = parse(raw)
  if not e then
    if raw then
      redis.call('HSET', jobs, member, encode({ attempt = 0, max = 0, lease = 0, created = now, due = now,
        err = 'malformed envelope found in Redis; the raw value is kept as the payload', payload = raw }))
      redis.call('ZADD', prefix .. 'dead:' .. topic, now, member)
      dead = dead + 1
    end
  elseif e.attempt >= e.max then
    e.err = 'lease expired on attempt ' .. e.attempt .. ' of ' .. e.max
      .. ' (the worker died or stopped renewing its lease)'
    redis.call('HSET', jobs, member, encode(e))
    redis.call('ZADD', prefix .. 'dead:' .. topic, now, member)
    dead = dead + 1
  else
    e.err = 'lease expired on attempt ' .. e.attempt .. ' (the worker died or stopped renewing its lease)'
    redis.call('HSET', jobs, member, encode(e))
    redis.call('LPUSH', prefix .. 'ready:' .. topic, id)
    requeued = requeued + 1
  end
end
return {requeued, dead}

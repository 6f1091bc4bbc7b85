-- dead: moves a job the caller holds to its topic's dead letters, with the error that killed it.
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] counts  KEYS[4] dead:<topic>
-- ARGV[1] member  ARGV[2] lease  ARGV[3] error
-- Returns 1, or 0 when the caller's lease was taken over (nothing changed).
local jobs, inflight, counts, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local member, lease, err = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local e = parse(redis.call('HGET', jobs, member))
if not e or e.lease ~= lease or not redis.call('ZSCORE', inflight, member) then return 0 end
e.err = err
redis.call('HSET', jobs, member, encode(e))
redis.call('ZREM', inflight, member)
bump(counts, split_member(member), 'inflight', -1)
redis.call('ZADD', dead, now_us(), member)
return 1

-- retry: puts a failed job back to run again after a delay, recording its error.
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] delayed  KEYS[4] counts
-- ARGV[1] key prefix  ARGV[2] member  ARGV[3] lease  ARGV[4] delay (us)  ARGV[5] error
-- Returns 1, or 0 when the caller's lease was taken over (nothing changed).
local jobs, inflight, delayed, counts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, member, lease, delay, err = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local e = parse(redis.call('HGET', jobs, member))
if not e or e.lease ~= lease or not redis.call('ZSCORE', inflight, member) then return 0 end
local now = now_us()
local before = earliest(delayed)
local topic, id = split_member(member)
e.err = err
e.due = now + delay
redis.call('HSET', jobs, member, encode(e))
redis.call('ZREM', inflight, member)
bump(counts, topic, 'inflight', -1)
place(prefix, delayed, counts, member, topic, id, e.due, now)
announce(prefix, delayed, before)
return 1

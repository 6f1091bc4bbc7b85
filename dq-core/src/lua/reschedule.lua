-- reschedule: moves a job that has not started to a new due time.
-- KEYS[1] jobs  KEYS[2] delayed  KEYS[3] inflight  KEYS[4] counts
-- ARGV[1] key prefix  ARGV[2] topic  ARGV[3] id  ARGV[4] when ('+<us>' after now, or '<us>')
-- Returns 1 rescheduled, 0 not found (or dead), 2 running (left alone).
local jobs, delayed, inflight, counts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, topic, id, when = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local member = topic .. ':' .. id
local e = parse(redis.call('HGET', jobs, member))
if not e then return 0 end
if redis.call('ZSCORE', inflight, member) then return 2 end
if redis.call('ZSCORE', prefix .. 'dead:' .. topic, member) then return 0 end
local now = now_us()
local before = earliest(delayed)
if redis.call('ZREM', delayed, member) == 1 then
  bump(counts, topic, 'delayed', -1)
else
  redis.call('LREM', prefix .. 'ready:' .. topic, 1, id)
end
e.due = due_from(when, now)
redis.call('HSET', jobs, member, encode(e))
place(prefix, delayed, counts, member, topic, id, e.due, now)
announce(prefix, delayed, before)
return 1

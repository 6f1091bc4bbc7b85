-- reschedule: moves a job that has not started to a new due time.
-- KEYS[1] jobs  KEYS[2] delayed  KEYS[3] inflight  KEYS[4] counts  KEYS[5] ready:<topic>
-- KEYS[6] dead:<topic> (declared for a cluster's reshard: see push.lua)
-- ARGV[1] key prefix  ARGV[2] topic  ARGV[3] id  ARGV[4] when ('+<us>' after now, or '<us>')
-- Returns 1 rescheduled, 0 not found (or dead), 2 running (left alone).
-- Reads first, writes after; a write that may delete a key (ZREM delayed, LREM ready) comes
-- after every other use of that key: see promote.lua.
local jobs, delayed, inflight, counts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, topic, id, when = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local member = topic .. ':' .. id
local ready = prefix .. 'ready:' .. topic
local e = parse(redis.call('HGET', jobs, member))
if not e then return 0 end
if redis.call('ZSCORE', inflight, member) then return 2 end
if redis.call('ZSCORE', prefix .. 'dead:' .. topic, member) then return 0 end
local now = now_us()
local before = earliest(delayed)
local was_delayed = redis.call('ZSCORE', delayed, member) ~= false
local left = redis.call('ZCARD', delayed) -- delayed jobs after this call
-- A job neither delayed nor queued (left so by an older build) gets an entry, and no LREM that
-- would take the new one.
local queued = not was_delayed and redis.call('LPOS', ready, id) ~= false
e.due = due_from(when, now)
local to_ready = e.due <= now
if to_ready or not was_delayed then redis.call('LLEN', ready) end -- touch
redis.call('HSET', jobs, member, encode(e))
if was_delayed and not to_ready then
  redis.call('ZADD', delayed, fmt(e.due), member)
elseif was_delayed then
  redis.call('RPUSH', ready, id)
  ring(prefix, topic)
  bump(counts, topic, 'delayed', -1)
  -- (Taking a job out of delayed cannot make an earlier due time: nothing to announce.)
  redis.call('ZREM', delayed, member)
  return 1
elseif to_ready then
  redis.call('RPUSH', ready, id)
  ring(prefix, topic)
  if queued then redis.call('LREM', ready, 1, id) end -- the first occurrence: the old place
  return 1
else
  redis.call('ZADD', delayed, fmt(e.due), member)
  bump(counts, topic, 'delayed', 1)
  left = left + 1
  if queued then redis.call('LREM', ready, 1, id) end
end
if left > 0 then announce(prefix, delayed, before) end
return 1

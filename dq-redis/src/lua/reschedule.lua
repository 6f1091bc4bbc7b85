-- reschedule: moves a job that has not started to a new due time.
-- KEYS[1] jobs  KEYS[2] delayed  KEYS[3] inflight  KEYS[4] counts  KEYS[5] ready:<topic>
-- KEYS[6] dead:<topic>  KEYS[7] gen:<topic> (declared for a cluster's reshard: see push.lua)
-- KEYS[8] unique_for  KEYS[9] done:<topic> (a kept succeeded job's record is not rescheduled)
-- KEYS[10] retain (declared, unused)  KEYS[11] ranked:<topic> (lib.lua's ready lanes: a job with
--   a priority goes there when it is to run now)
-- ARGV[1] key prefix  ARGV[2] topic  ARGV[3] id  ARGV[4] when ('+<us>' after now, or '<us>')
-- ARGV[5] 'far' where far jobs may be (lib.lua)
-- Returns 1 rescheduled, 0 not found (or dead, or a kept record), 2 running (left alone).
-- A ready job's entry stays in its list, made stale (lib.lua), and a new one is made if it is
-- to run now: O(1) however long the list. The write that may delete a key (ZREM delayed) is
-- last. A job of a group (lib.lua's groups) keeps the slot it holds; one waiting for a slot
-- (parked) keeps its place when it is to run now, and leaves its group's line when it is to
-- wait; one to run now that holds no slot goes in through its group (a delayed one after those
-- that fell due before it and wait for the mover, as push.lua).
local jobs, delayed, inflight, counts, gen = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[7]
local prefix, topic, id, when = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local member = topic .. ':' .. id
local raw = redis.call('HGET', jobs, member)
-- A far job (lib.lua) moves into `jobs` and waits there (or goes in line now); its element
-- goes blank.
local far = not raw and ARGV[5] == 'far' and far_where(prefix, member, topic)
if far then raw = far_read(far) end
local e = parse(raw)
if not e then return 0 end
if far then
  local now = now_us()
  local before = earliest(delayed)
  e.due = due_from(when, now)
  if e.due <= now then touch_lanes(prefix, topic) end
  redis.call('HSET', jobs, member, encode(e))
  far_blank(far)
  if e.due <= now then
    to_ready(prefix, counts, topic, {id}, {e.priority})
    ring(prefix, topic)
    bump(counts, topic, 'delayed', -1)
  else
    redis.call('ZADD', delayed, fmt(e.due), member)
    announce(prefix, delayed, before)
  end
  far_unindex(far)
  return 1
end
if redis.call('ZSCORE', inflight, member) then return 2 end
if redis.call('ZSCORE', prefix .. 'dead:' .. topic, member) then return 0 end
local was_delayed = redis.call('ZSCORE', delayed, member) ~= false
if not was_delayed and redis.call('HEXISTS', KEYS[9], member) == 1 then return 0 end
local now = now_us()
local before = earliest(delayed)
local left = redis.call('ZCARD', delayed) -- delayed jobs after this call
e.due = due_from(when, now)
local now_ready = e.due <= now
local k = e.group ~= '' and group_keys(prefix, topic)
-- A grouped job waiting with the delayed jobs and rescheduled to run now stays with them while
-- jobs that fell due earlier wait for the mover (it behind: workers down, a reshard), as a
-- push does (push.lua): the mover lets them into their groups in the order they fell due.
if k and now_ready and was_delayed and before and before <= now then now_ready = false end
local parked = k and not was_delayed and redis.call('ZSCORE', k.parked, id)
if parked and now_ready then
  redis.call('HSET', jobs, member, encode(e))
  return 1
end
if parked then
  touch_parked(k, {{id, e.group}}) -- touched before the first write
  redis.call('HSET', jobs, member, encode(e))
  unpark(k, {{id, e.group}})
  redis.call('ZADD', delayed, fmt(e.due), member)
  bump(counts, topic, 'delayed', 1)
  announce(prefix, delayed, before)
  tidy_parked(k, {{id, e.group}})
  return 1
end
local plan = k and now_ready and plan_enter(prefix, topic, {{id, e.group, e.priority}})
if now_ready then touch_lanes(prefix, topic) end
redis.call('HSET', jobs, member, encode(e))
if not was_delayed then invalidate(gen, counts, topic, id) end
if was_delayed and not now_ready then
  redis.call('ZADD', delayed, fmt(e.due), member)
elseif now_ready then
  if plan then
    write_enter(plan, counts)
  else
    to_ready(prefix, counts, topic, {id}, {e.priority})
    ring(prefix, topic)
  end
  if was_delayed then
    bump(counts, topic, 'delayed', -1)
    -- (Taking a job out of delayed cannot make an earlier due time: nothing to announce.)
    redis.call('ZREM', delayed, member)
  end
  return 1
else
  redis.call('ZADD', delayed, fmt(e.due), member)
  bump(counts, topic, 'delayed', 1)
  left = left + 1
end
if left > 0 then announce(prefix, delayed, before) end
return 1

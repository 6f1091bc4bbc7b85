-- workflow_push: stores a workflow (lib.lua's workflows), all or nothing: its steps with no
-- dependency become jobs at once (due their delay from now), the others wait, blocked, in the
-- workflow's hash, their envelopes with them.
-- KEYS[1] jobs  KEYS[2] delayed  KEYS[3] counts  KEYS[4] topics  KEYS[5] workflows  KEYS[6] workflow:<id>
-- KEYS[7..] ready:<topic>, ranked:<topic> and gen:<topic> of each topic of the workflow (declared)
-- ARGV[1] key prefix  ARGV[2] workflow id  ARGV[3] keep (us its record is kept once it ended)
-- ARGV[4] n, the steps  ARGV[5] the step names in order, comma-separated; then 10 values per
-- step: name, topic, id, delay (us, from its release), max_attempts, priority, trace ('': none),
-- after and dependents (`name|policy,...`), payload; then 'far' where far jobs may be (lib.lua:
-- a step's id taken by one refuses the workflow)
-- Returns {1} created, {0} a workflow of this id exists (nothing stored), {2, member} a step's
-- job id is taken by a job that exists (pending, dead or kept; nothing stored).
local jobs, delayed, counts, topics, steps_key, key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local prefix, wf, keep, n, names = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
if redis.call('EXISTS', key) == 1 then return {0} end
local members = {}
for i = 0, n - 1 do members[i + 1] = ARGV[7 + i * 10] .. ':' .. ARGV[8 + i * 10] end
local existing = hmget_all(jobs, members)
local stepped = hmget_all(steps_key, members)
-- (a far job's id too: lib.lua)
local far_any = ARGV[6 + n * 10] == 'far'
  and ((CLUSTER and need({prefix .. 'far'})) or redis.call('EXISTS', prefix .. 'far') == 1)
for i, member in ipairs(members) do
  if existing[i] or stepped[i] or (far_any and far_where(prefix, member, topic_of(member))) then
    return {2, member}
  end
end
local now = now_us()
local before = earliest(delayed)
-- Job events: each step's job pushed now is announced (`pushed`) on its topic's stream when
-- the topic's events are on (lib.lua's events); a blocked one, when it is released.
local step_topics, seen = {}, {}
for i = 0, n - 1 do
  local topic = ARGV[7 + i * 10]
  if not seen[topic] then
    seen[topic] = true
    step_topics[#step_topics + 1] = topic
  end
end
local streams = {}
for topic, cap in pairs(events_on(prefix .. 'events', step_topics)) do
  streams[topic] = events_open(prefix .. 'events:' .. topic, cap)
end
local pushed = {}
-- Every key written, touched before the first write (lib.lua's rule).
redis.call('EXISTS', counts, topics, steps_key)
for i = 7, #KEYS do redis.call('EXISTS', KEYS[i]) end
local fields = {'created', fmt(now), 'keep', keep, 'left', fmt(n), 'steps', names}
local refs, ranked = {}, {}
for i = 0, n - 1 do
  local b = 6 + i * 10
  local name, topic, id, delay = ARGV[b], ARGV[b + 1], ARGV[b + 2], tonumber(ARGV[b + 3])
  local priority, after = tonumber(ARGV[b + 5]), ARGV[b + 7]
  local member = members[i + 1]
  local e = {attempt = 0, max = tonumber(ARGV[b + 4]), created = now, due = now + delay, err = '',
             trace = ARGV[b + 6], priority = priority, payload = ARGV[b + 9]}
  local waits = #workflow_edges(after)
  push_all_pairs(fields, 'm:' .. name, member)
  push_all_pairs(fields, 'a:' .. name, after)
  push_all_pairs(fields, 'k:' .. name, ARGV[b + 8])
  if priority ~= 0 and not ranked[topic] then
    ranked[topic] = true
    redis.call('HSET', counts, topic .. ':ranked', 1)
  end
  if waits == 0 then
    push_all_pairs(fields, 's:' .. name, 'p')
    redis.call('HSET', jobs, member, encode(e))
    place(prefix, delayed, counts, member, topic, id, e.due, now, priority)
    if streams[topic] then pushed[#pushed + 1] = {streams[topic], id, e.due} end
  else
    push_all_pairs(fields, 's:' .. name, 'b')
    push_all_pairs(fields, 'w:' .. name, fmt(waits))
    push_all_pairs(fields, 'j:' .. name, encode(e))
    push_all_pairs(fields, 't:' .. name, fmt(delay))
  end
  refs[#refs + 1] = member
  refs[#refs + 1] = wf .. ':' .. name
  redis.call('SADD', topics, topic)
end
push_all('HSET', steps_key, refs)
push_all('HSET', key, fields)
announce(prefix, delayed, before)
local stamp = fmt(now)
for _, p in ipairs(pushed) do
  if p[3] > now then
    emit_event(p[1], 'pushed', p[2], 0, stamp, 'd', fmt(p[3]))
  else
    emit_event(p[1], 'pushed', p[2], 0, stamp)
  end
end
return {1}

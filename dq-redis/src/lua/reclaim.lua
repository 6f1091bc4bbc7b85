-- reclaim: takes back jobs whose lease expired (their worker died or stalled), a bounded batch.
-- A job that was on its last attempt is dead-lettered, so a job that kills its worker every
-- time cannot loop forever. The lost run is counted here (a fetch does not count it).
-- Batched: one ZREM, one HDEL, two HMGETs, one HSET, one LPUSH and one ZADD per topic.
-- A job's last attempt is the one its topic's listeners allow (`attempts`, written by every
-- runtime at start from its listeners' `retries`; a value that is not a whole number from 1 is
-- ignored), or the one given at push when no runtime said. The envelope keeps the push's, as
-- for failed runs, which each runtime judges by its listener.
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] counts  KEYS[4] leases  KEYS[5] attempts
-- (a job dead-lettered here is announced on `ended` for the waits for it, whatever its
-- topic's retention)
-- KEYS[6] cancels (a cancel's request goes with the lease: the job is taken back as any)
-- KEYS[7] events (the topics whose job events are on: a job taken back is announced on its
-- topic's stream, `stalled`, or `dead` with its error)
-- KEYS[8] progress (the entries of the jobs taken back go)
-- KEYS[9..] ready:<topic>, dead:<topic>, gen:<topic>, events:<topic> and ranked:<topic> of each topic the caller
-- knows (on a cluster, with the keys of its groups: lib.lua's `need`)
-- ARGV[1] key prefix  ARGV[2] most jobs (at most 1000)
-- A job dead-lettered here gives the slot of its group back, and its group lets its next job in
-- (lib.lua's groups); a job taken back to ready keeps its slot. One of a workflow step ends its
-- step, failed (lib.lua's workflows); one taken back whose workflow is cancelled is deleted,
-- its step cancelled, instead of going back in line.
-- Returns {requeued, dead_lettered, next_in_us, n, asked_member_1, asked_token_1, ... (n pairs),
-- unknown_topic_1, ...}: a job whose cancel was requested against its expired lease (cancel.lua)
-- is not taken back but left as it is, for the store to delete as cancelled (cancel_running.lua;
-- retry.lua says why).
-- Only jobs whose ready and dead keys are declared are taken back; the others stay expired
-- and their topics are returned for the caller to declare next time (see promote.lua).
-- Reads first (and a touch of every ready and dead key it will write), writes after, and the
-- write that may delete a key (ZREM inflight) last.
local jobs, inflight, counts, leases, attempts = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix, limit = ARGV[1], math.min(tonumber(ARGV[2]), 1000)
local progress = KEYS[8]
local declared = {}
for i = 9, #KEYS do declared[KEYS[i]] = true end
local now = now_us()
local found = redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, limit)
local expired, unknown, seen_unknown = {}, {}, {}
for _, member in ipairs(found) do
  local topic = topic_of(member)
  if topic and declared[prefix .. 'ready:' .. topic] and declared[prefix .. 'dead:' .. topic]
    and declared[prefix .. 'gen:' .. topic] and declared[prefix .. 'events:' .. topic]
    and declared[ranked_key(prefix, topic)]
    and (not CLUSTER or all_declared(topic_group_keys(prefix, topic))) then
    expired[#expired + 1] = member
  elseif topic and not seen_unknown[topic] then
    seen_unknown[topic] = true
    unknown[#unknown + 1] = topic
  end
end
-- The jobs whose cancel was requested against their lease stay as they are, for the caller.
local asked = {}
local cancelled = redis.call('EXISTS', KEYS[6]) == 1
if cancelled and #expired > 0 then
  local requests = redis.call('HMGET', KEYS[6], unpack(expired))
  local tokens = redis.call('HMGET', leases, unpack(expired))
  local rest = {}
  for i, member in ipairs(expired) do
    if requests[i] and requests[i] == tokens[i] then
      asked[#asked + 1] = member
      asked[#asked + 1] = tokens[i]
    else
      rest[#rest + 1] = member
    end
  end
  expired = rest
end
-- When the next lease still held runs out (us from now; -1: none), for the reclaimer to look
-- again then rather than up to half a lease later. Below +inf: the set's placeholder member
-- (lib.lua's INFLIGHT_AS_SKIPLIST) is no lease.
local next_lease = redis.call('ZRANGEBYSCORE', inflight, '(' .. fmt(now), '(+inf', 'WITHSCORES', 'LIMIT', 0, 1)
local next_in = next_lease[2] and math.max(tonumber(next_lease[2]) - now, 0) or -1
local out = {0, 0, next_in, #asked / 2}
for _, a in ipairs(asked) do out[#out + 1] = a end
for _, topic in ipairs(unknown) do out[#out + 1] = topic end
if #expired == 0 then return out end
local raws = redis.call('HMGET', jobs, unpack(expired))
local limits, topics = {}, {}
for _, member in ipairs(expired) do
  local topic = topic_of(member)
  if limits[topic] == nil then
    limits[topic] = false
    topics[#topics + 1] = topic
  end
end
for i, limit_of in ipairs(redis.call('HMGET', attempts, unpack(topics))) do
  local n = tonumber(limit_of)
  if n and n >= 1 and n <= 4294967295 and n == math.floor(n) then limits[topics[i]] = n end
end
-- Job events: the streams of the topics that have them on, opened before the first write, and
-- what to announce on them (topic, kind, id, run, error).
local streams, happened = {}, {}
for topic, cap in pairs(events_on(KEYS[7], topics)) do
  streams[topic] = events_open(prefix .. 'events:' .. topic, cap)
end
local writes, ready, levels, dead_by, running, requeued, dead = {}, {}, {}, {}, {}, 0, 0
-- The jobs dead-lettered here, for their workflow steps: {member, 'f', error}.
local workflow_ended = {}
-- The ids dead-lettered here, by topic (their groups' slots come back).
local dead_ids = {}
local function to_dead(topic, member)
  local ids = dead_ids[topic]
  if not ids then
    ids = {}
    dead_ids[topic] = ids
  end
  ids[#ids + 1] = string.sub(member, #topic + 2)
  if not dead_by[topic] then
    dead_by[topic] = {}
    redis.call('ZCARD', prefix .. 'dead:' .. topic) -- touch
  end
  local list = dead_by[topic]
  list[#list + 1] = fmt(now)
  list[#list + 1] = member
  dead = dead + 1
end
-- Backwards, so that after the LPUSHes the job that expired first is first in line.
for i = #expired, 1, -1 do
  local member = expired[i]
  local topic, id = split_member(member)
  running[topic] = (running[topic] or 0) + 1
  local raw = raws[i]
  local e = parse(raw)
  local max
  if e then
    e.attempt = e.attempt + 1
    max = limits[topic] or e.max
  end
  if not e then
    if raw then
      writes[#writes + 1] = member
      writes[#writes + 1] = encode({ attempt = 0, max = 0, created = now, due = now,
        err = 'malformed envelope found in Redis; the raw value is kept as the payload', payload = raw })
      to_dead(topic, member)
      workflow_ended[#workflow_ended + 1] = {member, 'f', 'malformed envelope found in Redis'}
      if streams[topic] then happened[#happened + 1] = {topic, 'dead', id, 0,
        'malformed envelope found in Redis; the raw value is kept as the payload'} end
    end
  elseif e.attempt >= max then
    failed_run(e, 'lease expired on attempt ' .. e.attempt .. ' of ' .. max
      .. ' (the worker died or stopped renewing its lease)', e.attempt, now)
    writes[#writes + 1] = member
    writes[#writes + 1] = encode(e)
    to_dead(topic, member)
    workflow_ended[#workflow_ended + 1] = {member, 'f', e.err}
    if streams[topic] then happened[#happened + 1] = {topic, 'dead', id, e.attempt, e.err} end
  else
    failed_run(e, 'lease expired on attempt ' .. e.attempt
      .. ' (the worker died or stopped renewing its lease)', e.attempt, now)
    writes[#writes + 1] = member
    writes[#writes + 1] = encode(e)
    if not ready[topic] then
      ready[topic] = {}
      levels[topic] = {}
      touch_lanes(prefix, topic)
    end
    table.insert(ready[topic], id)
    table.insert(levels[topic], e.priority)
    requeued = requeued + 1
    if streams[topic] then happened[#happened + 1] = {topic, 'stalled', id, e.attempt} end
  end
end
local group_plans = {}
defer_needs() -- the lists of every grouped topic's groups named in one stop (lib.lua's `need`)
for topic, ids in pairs(dead_ids) do group_plans[#group_plans + 1] = plan_leave(prefix, topic, ids) end
needs_met()
local reported = has_progress(progress)
-- The jobs taken back whose workflow is cancelled are deleted instead (lib.lua's workflows):
-- they leave the lists of jobs put back in line.
local taken_back = {}
for topic, ids in pairs(ready) do
  for _, id in ipairs(ids) do taken_back[#taken_back + 1] = topic .. ':' .. id end
end
local workflow = workflow_plan(prefix, workflow_ended, taken_back)
if workflow and next(workflow.stopped) then
  for topic, ids in pairs(ready) do
    local kept_ids, kept_levels = {}, {}
    for i, id in ipairs(ids) do
      if workflow.stopped[topic .. ':' .. id] then
        requeued = requeued - 1
      else
        kept_ids[#kept_ids + 1] = id
        kept_levels[#kept_levels + 1] = levels[topic][i]
      end
    end
    ready[topic], levels[topic] = kept_ids, kept_levels
  end
end
proceed_when_full(leases) -- taking back expired leases must go through when Redis is full
workflow_write(workflow, now)
if #writes > 0 then redis.call('HSET', jobs, unpack(writes)) end
-- The dead letters announced on `ended` for the waits for them, in one message for the call
-- (the members one per line, as the ack's): one message whatever the number, so that a burst of
-- dead letters does not flood a cluster's bus, which copies each message to every node.
local died = {}
for topic, entries in pairs(dead_by) do
  redis.call('ZADD', prefix .. 'dead:' .. topic, unpack(entries))
  for i = 2, #entries, 2 do died[#died + 1] = entries[i] end
end
if #died > 0 then redis.call('PUBLISH', prefix .. 'ended', table.concat(died, '\n')) end
for topic, ids in pairs(ready) do
  if #ids > 0 then
    to_ready(prefix, counts, topic, ids, levels[topic], true)
    ring(prefix, topic)
  end
end
for _, plan in ipairs(group_plans) do write_leave(plan, counts) end
-- Every expired lease was a run that failed (its worker died or stalled).
for topic, k in pairs(running) do
  bump(counts, topic, 'inflight', -k)
  tally(counts, topic, 'failed', k, now)
end
if cancelled then redis.call('HDEL', KEYS[6], unpack(expired)) end
end_leases(inflight, leases, expired)
if reported then clear_progress(progress, expired) end
local stamp = fmt(now)
for _, h in ipairs(happened) do
  if h[5] then
    emit_event(streams[h[1]], h[2], h[3], h[4], stamp, 'e', h[5])
  else
    emit_event(streams[h[1]], h[2], h[3], h[4], stamp)
  end
end
workflow_finish(workflow, now)
out[1], out[2] = requeued, dead
return out

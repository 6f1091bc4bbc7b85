-- ack: completes jobs whose lease the caller still holds; refuses stale ones. A job of a topic
-- with a retention (`retain`) is kept as a succeeded record with its handler's value: its
-- envelope stays where it is, in `jobs` (as a dead letter's does: no copy), its time and value
-- in `done:<topic>` (lib.lua); the records past the retention go a call's worth at a time, and
-- `ended` announces the jobs acked to the waits for them (while a wait listens: `waiting`), kept
-- or not: a wait made before its topic's retention was recorded learns the job's end.
-- Batched: one HMGET, one ZREM and two HDELs (three when jobs reported progress) for the whole
-- batch.
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] counts  KEYS[4] leases  KEYS[5] unique  KEYS[6] unique_for
-- KEYS[7] retain  KEYS[8] cancels (a cancel's request goes with the lease)
-- KEYS[9..] done:<topic> of each topic of the call, in the order of ARGV's topic list (its
-- `done:<topic>:order` is named from it); then
-- progress (the acked jobs' entries go); then events and events:<topic> of each topic of the
-- call, in the same order: when a topic's job events are on, each job acked is announced
-- (`succeeded`, with its run, and its value when the topic keeps it); then `waiting` (a wait
-- listens for the ends of the shard's jobs while it exists).
-- A job pushed with unique_for keeps its id reserved (in `unique`) for that long from now.
-- ARGV[1] n, the number of topics; ARGV[2..n+1] the topics; ARGV[n+2] the call's stamp (Redis'
-- time as the caller knows it, us: store/clock.rs); then member, token, record, run quadruples
-- (record: `<stamp>:<value>`, value '' for none, stored as it comes for a topic that keeps it;
-- run: which run succeeded, 0 when the caller does not know, for the `succeeded` event, read
-- from the job then; at most 1000 quadruples).
-- A job of a group gives its slot back, and its group lets its next job in (lib.lua's groups).
-- A job of a workflow step ends its step, and releases the dependents it was the last
-- dependency of (lib.lua's workflows).
-- Returns {acked, stale_member_1, ...}: a stale member's lease was taken over (or it was cancelled).
local jobs, inflight, counts, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local retain, cancels = KEYS[7], KEYS[8]
local n_topics = tonumber(ARGV[1])
local progress = KEYS[9 + n_topics]
local waiting = KEYS[11 + 2 * n_topics]
local done_key = {}
for i = 1, n_topics do done_key[ARGV[1 + i]] = KEYS[8 + i] end
local stamp = ARGV[2 + n_topics]
-- Lists filled by count (`#t + 1` would search for the end of the list at every job).
local members, tokens, values, said_runs, n = {}, {}, {}, {}, 0
for i = 3 + n_topics, #ARGV, 4 do
  n = n + 1
  members[n], tokens[n], values[n], said_runs[n] = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
end
local out = {0}
if #members == 0 then return out end
local held = redis.call('HMGET', leases, unpack(members))
local done, done_values, done_runs, done_topics, per_topic, seen = {}, {}, {}, {}, {}, {}
-- The topic of every job when the call has one (the caller lists its jobs' topics).
local only_topic = n_topics == 1 and ARGV[2]
local d = 0
for i, member in ipairs(members) do
  if held[i] == tokens[i] and not seen[member] then
    seen[member] = true
    d = d + 1
    done[d], done_values[d], done_runs[d] = member, values[i], said_runs[i]
    local topic = only_topic or topic_of(member)
    done_topics[d] = topic
    per_topic[topic] = (per_topic[topic] or 0) + 1
  else
    out[#out + 1] = member
  end
end
local now = #done > 0 and now_us()
local holds = #done > 0 and redis.call('EXISTS', KEYS[6]) == 1 and redis.call('HMGET', KEYS[6], unpack(done))
-- The topics that keep their succeeded jobs, and what they keep: read before any write.
local kept = {}
if #done > 0 and redis.call('EXISTS', retain) == 1 then
  local names = {}
  for topic in pairs(per_topic) do names[#names + 1] = topic end
  local specs = redis.call('HMGET', retain, unpack(names))
  for i, topic in ipairs(names) do
    local age, count = string.match(specs[i] or '', '^(%d+):(%d+)$')
    if age and done_key[topic] then
      kept[topic] = {age = tonumber(age), count = math.max(tonumber(count), 1)}
    end
  end
end
-- The jobs kept (their envelopes stay), their records (member, `<stamp>:<value>` pairs for
-- HSET, as the caller wrote them), and the jobs whose envelopes go.
-- Without a topic that keeps them, every envelope goes: `drop` is `done`.
-- A call of one topic that keeps its jobs keeps them all: `done` is its list as it is.
local drop, keep_of, records_of = done, {}, {}
if only_topic and kept[only_topic] then
  drop = {}
  local records = {}
  for i = 1, d do records[2 * i - 1], records[2 * i] = done[i], done_values[i] end
  keep_of[only_topic], records_of[only_topic] = done, records
elseif next(kept) then
  drop = {}
  local filled = {}
  for i, member in ipairs(done) do
    local topic = done_topics[i]
    if kept[topic] then
      local list, records = keep_of[topic], records_of[topic]
      if not list then
        list, records = {}, {}
        keep_of[topic], records_of[topic], filled[topic] = list, records, 0
      end
      local k = filled[topic] + 1
      filled[topic] = k
      list[k], records[2 * k - 1], records[2 * k] = member, member, done_values[i]
    else
      drop[#drop + 1] = member
    end
  end
end
if #done > 0 then redis.call('EXISTS', jobs) end -- touched before the first write
-- Whether a wait listens for the ends of this shard's jobs (store/ended.rs marks it while one
-- does): the announcement is made only then.
local heard = #done > 0 and redis.call('EXISTS', waiting) == 1
-- Where each kept topic's jobs go and which of its slices go (lib.lua), read before any write.
local plans = {}
for topic, members_kept in pairs(keep_of) do
  plans[topic] = plan_records(done_key[topic], topic, kept[topic], now, members_kept)
end
-- Job events: the streams of the call's topics that have them on, and the runs of their jobs,
-- read before the first write.
local streams, runs = {}, {}
if #done > 0 then
  local names, stream_key = {}, {}
  for i = 1, n_topics do stream_key[ARGV[1 + i]] = KEYS[10 + n_topics + i] end
  for topic in pairs(per_topic) do names[#names + 1] = topic end
  for topic, cap in pairs(events_on(KEYS[10 + n_topics], names)) do
    if stream_key[topic] then streams[topic] = events_open(stream_key[topic], cap) end
  end
  if next(streams) then
    -- The runs the caller said; the others read from the jobs (before their envelopes go).
    local unsaid, at = {}, {}
    for i, member in ipairs(done) do
      if streams[done_topics[i]] then
        if done_runs[i] ~= '0' then
          runs[i] = done_runs[i]
        else
          unsaid[#unsaid + 1] = member
          at[#unsaid] = i
        end
      end
    end
    for k, counted in ipairs(runs_of_all(jobs, unsaid)) do runs[at[k]] = counted + 1 end
  end
end
-- Groups: the slots the jobs give back, and the jobs their groups let in, read first; only
-- the jobs of topics where a job holds a slot (`gactive:<topic>`) are looked at.
local prefix = string.sub(jobs, 1, -5)
local group_plans = {}
local ids_of = {}
for topic in pairs(per_topic) do
  local active = prefix .. 'gactive:' .. topic
  if CLUSTER then need({active}) end
  if redis.call('EXISTS', active) == 1 then ids_of[topic] = {} end
end
if next(ids_of) then
  defer_needs() -- the lists of every grouped topic's groups named in one stop (lib.lua's `need`)
  for i, member in ipairs(done) do
    local topic = done_topics[i]
    local ids = ids_of[topic]
    if ids then ids[#ids + 1] = string.sub(member, #topic + 2) end
  end
  for topic, ids in pairs(ids_of) do
    group_plans[#group_plans + 1] = plan_leave(prefix, topic, ids)
  end
  needs_met()
end
local cancelled = #done > 0 and redis.call('EXISTS', cancels) == 1
local reported = #done > 0 and has_progress(progress)
-- Workflows: the steps whose jobs these are end with them, and release their dependents (lib.lua).
-- A shard without workflows pays one EXISTS.
local workflow = nil
if #done > 0 and redis.call('EXISTS', prefix .. 'workflows') == 1 then
  local ended, cut = {}, #stamp + 2
  for i, member in ipairs(done) do ended[i] = {member, 'd', string.sub(done_values[i], cut)} end
  workflow = workflow_plan(prefix, ended)
end
if #done > 0 then proceed_when_full(leases) end -- an ack must go through when Redis is full
workflow_write(workflow, now)
local reserved, released = {}, {}
if holds then
  for i, hold in ipairs(holds) do
    if hold then
      reserved[#reserved + 1] = fmt(now + tonumber(hold))
      reserved[#reserved + 1] = done[i]
      released[#released + 1] = done[i]
    end
  end
  if #reserved > 0 then redis.call('ZADD', KEYS[5], unpack(reserved)) end
end
if #done > 0 then end_leases(inflight, leases, done) end
if cancelled then redis.call('HDEL', cancels, unpack(done)) end
if next(keep_of) then
  for topic, plan in pairs(plans) do
    local records = records_of[topic]
    if #plan.skipped > 0 then
      -- More jobs than the count in one call: the records of the last ones only.
      records = {}
      for i = #records_of[topic] - 2 * #plan.kept + 1, #records_of[topic] do
        records[#records + 1] = records_of[topic][i]
      end
      for _, member in ipairs(plan.skipped) do drop[#drop + 1] = member end
    end
    keep_records(plan, records, stamp)
    -- The envelopes of the records forgotten: `jobs` still holds the ones just kept, so these
    -- HDELs cannot delete it (the last one, of `drop`, may).
    for _, gone in ipairs(plan.gone) do
      if #gone > 0 then redis.call('HDEL', jobs, unpack(gone)) end
    end
  end
end
if heard then
  -- `jobs` is <prefix>jobs: the channel is <prefix>ended. One message for the call, the
  -- members one per line.
  redis.call('PUBLISH', string.sub(jobs, 1, -5) .. 'ended', table.concat(done, '\n'))
end
out[1] = #done
for topic, k in pairs(per_topic) do
  bump(counts, topic, 'inflight', -k)
  tally(counts, topic, 'done', k, now)
end
for _, plan in ipairs(group_plans) do write_leave(plan, counts) end
if #released > 0 then redis.call('HDEL', KEYS[6], unpack(released)) end
if #drop > 0 then redis.call('HDEL', jobs, unpack(drop)) end
if reported then clear_progress(progress, done) end
if next(streams) then
  -- One entry per topic: the jobs (as `topic:id`: the reader keeps the id), their runs, and
  -- their values when the topic keeps them (a record without its stamp). A call of one topic
  -- hands its lists over as they are.
  local event_stamp = fmt(now)
  if next(kept) then
    local cut = #stamp + 2
    for i, record in ipairs(done_values) do done_values[i] = string.sub(record, cut) end
  end
  local only = n_topics == 1 and ARGV[2]
  if only and streams[only] then
    emit_events(streams[only], 'succeeded', done, runs, event_stamp, 'v', kept[only] and done_values or nil)
  else
    local batch = {}
    for i, member in ipairs(done) do
      local topic = done_topics[i]
      if streams[topic] then
        local b = batch[topic] or {ids = {}, runs = {}, values = kept[topic] and {}}
        batch[topic] = b
        b.ids[#b.ids + 1] = member
        b.runs[#b.runs + 1] = runs[i]
        if b.values then b.values[#b.values + 1] = done_values[i] end
      end
    end
    for topic, b in pairs(batch) do
      emit_events(streams[topic], 'succeeded', b.ids, b.runs, event_stamp, 'v', b.values or nil)
    end
  end
end
workflow_finish(workflow, now)
return out

-- promote: moves due jobs from the delayed set to their topics' ready lists, a bounded batch.
-- KEYS[1] delayed  KEYS[2] counts  KEYS[3] jobs (read for the priorities and groups of the
--   jobs whose topic is marked ranked or grouped: lib.lua's ready lanes and groups; a grouped
--   job goes in through its group, and may wait there, parked, for a slot)  KEYS[4] events (the topics whose job events
--   are on: `promoted` on their streams)  KEYS[5..] ready:<topic>, gen:<topic>, events:<topic>
--   and ranked:<topic> of each topic the caller knows (on a cluster, with the keys of its groups:
--   lib.lua's `need`)
-- ARGV[1] key prefix  ARGV[2] most jobs to move (at most 10000)  ARGV[3] 'far' where far jobs
--   may be (lib.lua): they are moved into place from there
-- Returns {moved, next_due_us or -1, now_us, n, unknown_topic_1, ..., unknown_topic_n,
--          topic_1, count_1, topic_2, count_2, ...}
-- Only jobs whose ready list is declared in KEYS move. On a cluster whose slot is migrating,
-- Redis checks the declared keys before the script runs and refuses it (TRYAGAIN, or ASK to
-- the new node) while they are split between the nodes; a key the script used without
-- declaring it would be read and written on whichever node the script ran, creating a second
-- list there. Due jobs of undeclared topics stay due, and their topics are
-- returned for the caller to declare in its next call.
-- Every key is also read (touched) before the first write, and none is read after a write
-- that may have deleted it.
local delayed, counts = KEYS[1], KEYS[2]
local prefix, limit = ARGV[1], tonumber(ARGV[2])
local declared = {}
for i = 5, #KEYS do declared[KEYS[i]] = true end
local now = now_us()
local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
-- Far jobs (lib.lua) whose part is due to move: into `jobs` and `delayed`, at most two parts a
-- call, after the promotion's writes and before its removals. They count as delayed already.
local far_on = ARGV[3] == 'far'
local far = far_on and far_due(prefix, now, 2)
redis.call('EXISTS', KEYS[3]) -- `jobs`, touched before the first write
local by_topic, order, unknown, gone = {}, {}, {}, {}
-- Whether each topic met is declared: decided once per topic, not per job.
local usable = {}
for _, member in ipairs(due) do
  local colon = string.find(member, ':', 1, true)
  if colon then
    local topic, id = string.sub(member, 1, colon - 1), string.sub(member, colon + 1)
    local ok = usable[topic]
    if ok == nil then
      ok = declared[prefix .. 'ready:' .. topic] and declared[prefix .. 'gen:' .. topic]
        and declared[prefix .. 'events:' .. topic] and declared[ranked_key(prefix, topic)]
        and (not CLUSTER or all_declared(topic_group_keys(prefix, topic))) or false
      usable[topic] = ok
      if ok then
        by_topic[topic] = {}
        order[#order + 1] = topic
        touch_lanes(prefix, topic) -- before any write
      else
        unknown[#unknown + 1] = topic
      end
    end
    if ok then
      local list = by_topic[topic]
      list[#list + 1] = id
      gone[#gone + 1] = member
    end
  else
    gone[#gone + 1] = member -- not a dq member: dropped, as before
  end
end
local out = {#gone, -1, fmt(now), #unknown}
if #unknown > 0 then
  out[2] = fmt(now) -- jobs of undeclared topics are due now
else
  -- The next due time once these are gone: the entry ranked right after them.
  local after = redis.call('ZRANGE', delayed, #due, #due, 'WITHSCORES')
  local next_due = tonumber(after[2] or '')
  -- And the far jobs': those moved now (due already, when the mover was late), then the next
  -- part's move.
  local far_first, far_then
  if far then
    far_first, far_then = far.first, far.next
  elseif far_on then
    far_then = far_next(prefix, 0)
  end
  for _, t in ipairs({far_first or false, far_then or false}) do
    if t and (not next_due or t < next_due) then next_due = math.max(t, 0) end
  end
  if next_due then out[2] = fmt(next_due) end
end
for _, topic in ipairs(unknown) do out[#out + 1] = topic end
if #gone == 0 then
  if far then
    proceed_when_full(counts) -- far jobs move into place when Redis is full too
    far_move(far, KEYS[3], delayed)
  end
  return out
end
-- Job events: the streams of the topics that have them on, read before the first write. A
-- promotion does not read the jobs it moves, so `promoted` carries no run (read as 0): reading
-- every envelope for it cost more than the rest of the promotion.
local streams = {}
for topic, cap in pairs(events_on(KEYS[4], order)) do
  streams[topic] = events_open(prefix .. 'events:' .. topic, cap)
end
-- The priorities of the jobs of topics whose jobs have them (one HMGET per 1000 jobs of
-- those; none for the others).
local priorities, group_plans = {}, {}
local marks = {}
for i, topic in ipairs(order) do
  marks[2 * i - 1] = topic .. ':ranked'
  marks[2 * i] = topic .. ':grouped'
end
local flags = redis.call('HMGET', counts, unpack(marks))
defer_needs() -- the lists of every grouped topic's groups named in one stop (lib.lua's `need`)
for i, topic in ipairs(order) do
  local ranked, grouped = flags[2 * i - 1], flags[2 * i]
  if ranked or grouped then
    local ids = by_topic[topic]
    local members, levels, groups = {}, {}, {}
    for k, id in ipairs(ids) do members[k] = topic .. ':' .. id end
    for x, raw in ipairs(hmget_all(KEYS[3], members)) do
      levels[x], groups[x] = rank_and_group(raw)
    end
    if grouped then
      -- The grouped jobs go in through their groups (lib.lua), the others to the lanes.
      local plain, plain_levels, entering = {}, {}, {}
      for x, id in ipairs(ids) do
        if groups[x] then
          entering[#entering + 1] = {id, groups[x], levels[x]}
        else
          plain[#plain + 1] = id
          plain_levels[#plain] = levels[x]
        end
      end
      by_topic[topic], levels = plain, plain_levels
      if #entering > 0 then group_plans[topic] = {plan_enter(prefix, topic, entering), #entering} end
    end
    priorities[topic] = levels
  end
end
needs_met()
proceed_when_full(counts) -- due jobs move to ready when Redis is full too
for _, topic in ipairs(order) do
  local plain = by_topic[topic]
  if #plain > 0 then
    to_ready(prefix, counts, topic, plain, priorities[topic])
    ring(prefix, topic)
  end
  local moved = #plain
  local entering = group_plans[topic]
  if entering then
    write_enter(entering[1], counts)
    moved = moved + entering[2]
  end
  bump(counts, topic, 'delayed', -moved)
  out[#out + 1] = topic
  out[#out + 1] = moved
end
for topic, stream in pairs(streams) do
  local stamp = fmt(now)
  local ids = by_topic[topic]
  local entering = group_plans[topic]
  if entering then
    ids = {}
    for _, id in ipairs(by_topic[topic]) do ids[#ids + 1] = id end
    for _, j in ipairs(entering[1].park) do ids[#ids + 1] = j[1] end
    for _, id in ipairs(entering[1].admit) do ids[#ids + 1] = id end
  end
  emit_events(stream, 'promoted', ids, nil, stamp)
end
far_move(far, KEYS[3], delayed)
-- Last: this may empty (delete) the delayed set. When every due member moved they are exactly
-- the lowest-ranked ones, so they go by rank in one call (unless far jobs came in).
if #gone == #due and not (far and far.moved > 0) then
  redis.call('ZREMRANGEBYRANK', delayed, 0, #due - 1)
else
  local i = 1
  while i <= #gone do
    local j = math.min(i + 999, #gone)
    redis.call('ZREM', delayed, unpack(gone, i, j))
    i = j + 1
  end
end
return out

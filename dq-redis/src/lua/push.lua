-- push: creates jobs, or leaves (or replaces) the ones whose id is already pending.
-- Batched: one HMGET to find existing ids, one HSET, one ZADD, one RPUSH and one HINCRBY per
-- topic for the whole call; only ids that already exist take the per-job path.
-- KEYS[1] jobs  KEYS[2] delayed  KEYS[3] topics  KEYS[4] counts  KEYS[5] inflight
-- KEYS[6] unique  KEYS[7] unique_for  KEYS[8] tick_fence (a new job of an id kept as succeeded
--   replaces that record: its envelope in `jobs`, its entry in `done:<topic>`)
-- KEYS[9] events (the topics whose job events are on: a new job of one is announced on its
--   stream, `pushed`, with its due time when it waits)
-- KEYS[10..] ready:<topic>, dead:<topic>, gen:<topic>, done:<topic>, events:<topic> and ranked:<topic> of every topic
--   in the call (declared, not used by position: on a cluster Redis refuses the call while declared keys
--   are split between two nodes during a reshard, instead of running it where a key reads as missing)
-- ARGV[1] key prefix  ARGV[2] 'keep' | 'replace', then ' far' when new jobs may be stored far
--   (lib.lua; on a cluster, the index hashes of the ids are declared: RedisStore::far_indexes), or ' seen' when far jobs are only looked for
--   (Config::compact off: before a rollback), then ' new' when dq drew every id of the call
--   (NewJob::id_drawn: no far job holds one, and none is looked for)  ARGV[3] n (jobs in this call, at most 1000)
-- then 7 values per job: topic, id, when ('+<us>' after now, or '<us>' since the epoch),
--   max_attempts, unique_for (us the id stays reserved after the job succeeds; 0: none),
--   fence ('' or '<generation>:<tick us>:<schedule id>' for a schedule's tick: created only
--   when the schedule's fence in tick_fence is below (generation, tick), and then raised to it;
--   refused as kept otherwise), payload
-- then, after the n jobs' values and only when a job of the call has one, one trace context per
--   job, in order (ARGV[4 + n * 7 + i] for job i from 0; '' or absent: none), present too when a
--   job has a priority; then, only when a job of the call has a priority, one priority per job
--   (ARGV[4 + n * 8 + i]; absent: 0); then, only when a job of the call has a group, one group
--   per job (ARGV[4 + n * 9 + i]; '' or absent: none; the values before are all present then).
--   A job is written in envelope format 4 with a priority or a group, 3 with a trace context,
--   else 2 (lib.lua); one with a priority marks its topic ranked (lib.lua's ready lanes), one
--   with a group marks it grouped (`<topic>:grouped` in counts: promote.lua then reads its
--   jobs' groups) and, when due, goes in through its group (lib.lua's groups: it may wait,
--   parked, for a slot). A replace that moves a job holding a slot to another group (or out of
--   groups) gives that slot back; the job then waits in the delayed set, due when it was, so
--   that the mover lets it into its new group (lib.lua's groups)
-- Returns {earliest_due_if_it_moved_earlier_or_-1, code_1, ..., code_n}; codes:
--   0 kept (already pending), 1 created, 2 replaced, 3 running (replace refused: it is running),
--   '4:<us>' refused: the id is reserved for <us> more (a job with unique_for finished)
--   '5:<generation>' refused: the schedule's ticks in this shard were made under <generation>,
--     a later one than this push's (the schedule's generation went back in shard 0)
--   '6:<bound>' refused: the topic holds as many pending jobs (delayed, ready, running) as its
--     max_pending lets this shard hold (`limits`: `<topic>:max_pending` -> `<share>:<bound>`)
-- Phase 1 only reads (and touches every ready list it will write); phase 2 writes, and the
-- writes that may delete a key (ZREM of delayed or dead, LREM) come after every other use of
-- that key: on a cluster whose slot is migrating a missing key aborts the script where it
-- stands, so it must abort before the first write (lib.lua's rule).
local jobs, delayed, topics, counts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- New jobs with nothing to weigh are written here, as the general path below would write them,
-- without its tables and before the closures of the library definitions only it uses
-- (scripts.rs, `--@lib`): one awaited push pays about half the Redis time and a batch of a
-- thousand about three quarters (BENCHMARKS.md, "One awaited push" and "Redis' time per job").
-- Nothing to weigh: no trace context, priority, group, schedule fence or reservation of their
-- own, none in the shard either (no `unique`, `workflows`, `limits` or `events` key: one
-- EXISTS), no id twice in the call and none in `jobs` (nor among the far jobs, where the shard
-- holds some); anything else goes on below, which reads again what this part read. Jobs due in
-- a far bucket are stored far here too (lib.lua's far_plan and far_write, as below).
local n = tonumber(ARGV[3])
if not ARGV[4 + n * 7]
  and redis.call('EXISTS', KEYS[6], ARGV[1] .. 'workflows', ARGV[1] .. 'limits', KEYS[9]) == 0 then
  local members, seen, plain = {}, {}, true
  for i = 0, n - 1 do
    local b = i * 7
    local member = ARGV[4 + b] .. ':' .. ARGV[5 + b]
    if ARGV[8 + b] ~= '0' or ARGV[9 + b] ~= '' or seen[member] then
      plain = false
      break
    end
    seen[member] = true
    members[i + 1] = member
  end
  local found = plain and redis.call('HMGET', jobs, unpack(members))
  if plain then
    for i = 1, n do
      if found[i] then
        plain = false
        break
      end
    end
  end
  -- Far jobs (lib.lua): in a shard that holds any, an id is looked up in their index too (one
  -- found takes the general path); a new job due in a far bucket is stored far below.
  local far_on = string.find(ARGV[2], ' far', 1, true) ~= nil
  local far_seen = (far_on or string.find(ARGV[2], ' seen', 1, true))
    and not string.find(ARGV[2], ' new', 1, true)
  if plain and far_seen and ((CLUSTER and need({ARGV[1] .. 'far'})) or redis.call('EXISTS', ARGV[1] .. 'far') == 1) then
    for i = 1, n do
      local index = far_index(ARGV[1], members[i])
      if CLUSTER then need({index}) end -- (declared by the caller: RedisStore::far_indexes)
      if redis.call('HEXISTS', index, members[i]) == 1 then
        plain = false
        break
      end
    end
  end
  local now = plain and now_us()
  local dues, due_strs = {}, {}
  if plain then
    for i = 0, n - 1 do
      local when = ARGV[6 + i * 7]
      if not dues[when] then
        local due = due_from(when, now)
        dues[when], due_strs[when] = due, fmt(due)
      end
    end
  end
  if plain then
    local prefix = ARGV[1]
    local before = earliest(delayed)
    local created = ':' .. fmt(now) .. ':'
    local writes, adds, ready_by, delayed_by, out = {}, {}, {}, {}, {-1}
    -- The earliest of the call's delayed jobs: the set's earliest now, when it is before `before`
    -- (new jobs only: nothing left the set).
    local first = nil
    -- New jobs due in a far bucket go far (lib.lua's far_plan), as the general path stores them;
    -- the earliest of their due times.
    local far_jobs = {}
    for i = 0, n - 1 do
      local b = i * 7
      local topic, when = ARGV[4 + b], ARGV[6 + b]
      local due = dues[when]
      local due_str = due_strs[when]
      local bucket = far_on and far_bucket(due, now)
      if bucket then
        far_jobs[#far_jobs + 1] = { topic = topic, member = members[i + 1], bucket = bucket,
          due = due, element = far_element(ARGV[7 + b], due, now, bucket, ARGV[5 + b], ARGV[10 + b]),
          index = far_index(prefix, members[i + 1]) }
        delayed_by[topic] = (delayed_by[topic] or 0) + 1
      else
        writes[#writes + 1] = members[i + 1]
        writes[#writes + 1] = '2:0:' .. ARGV[7 + b] .. created .. due_str .. ':0:' .. ARGV[10 + b]
      end
      if bucket then
        -- (stored far: neither in `jobs` nor in `delayed`)
      elseif due > now then
        adds[#adds + 1] = due_str
        adds[#adds + 1] = members[i + 1]
        delayed_by[topic] = (delayed_by[topic] or 0) + 1
        if not first or due < first then first = due end
      else
        local list = ready_by[topic]
        if not list then
          list = {}
          ready_by[topic] = list
          touch_lanes(prefix, topic)
        end
        list[#list + 1] = ARGV[5 + b]
      end
      out[i + 2] = 1
    end
    redis.call('EXISTS', counts, topics)
    -- The parts and index hashes the far jobs go to, touched before the first write (on a
    -- cluster, those not declared named in one stop: lib.lua's `need`); when the next move of
    -- far jobs is due as things stand.
    local far_writing = false
    if #far_jobs > 0 then
      defer_needs()
      far_writing = far_plan(prefix, far_jobs)
      needs_met()
    end
    if #writes > 0 then redis.call('HSET', jobs, unpack(writes)) end
    if #adds > 0 then redis.call('ZADD', delayed, unpack(adds)) end
    for topic, list in pairs(ready_by) do
      to_ready(prefix, counts, topic, list)
      ring(prefix, topic)
      redis.call('SADD', topics, topic)
    end
    for topic, k in pairs(delayed_by) do
      bump(counts, topic, 'delayed', k)
      redis.call('SADD', topics, topic)
    end
    if first then out[1] = announce_first(prefix, first, before) end
    if far_writing then far_write(far_writing, before) end
    return out
  end
end
--@lib
local prefix, replace = ARGV[1], string.sub(ARGV[2], 1, 7) == 'replace'
-- Whether new jobs may go far (lib.lua), and whether ids are looked up among far jobs (where
-- they may go, or may have gone before: ' seen'; not ids dq drew: ' new').
local far_on = string.find(ARGV[2], ' far', 1, true) ~= nil
local far_seen = (far_on or string.find(ARGV[2], ' seen', 1, true))
  and not string.find(ARGV[2], ' new', 1, true)
local inflight = KEYS[5] -- only read, in phase 1
local unique, unique_for, tick_fence = KEYS[6], KEYS[7], KEYS[8]
-- The fences this call raises: schedule id -> {generation, tick}.
local fences = {}
local now = now_us()
-- Most pushes meet no reservation at all: one EXISTS instead of a ZSCORE per job.
local any_reserved = redis.call('EXISTS', unique) == 1
local reserve, unreserve = {}, {}
local before = earliest(delayed)
local out = {-1}
local members = {}
for i = 0, n - 1 do members[i + 1] = ARGV[4 + i * 7] .. ':' .. ARGV[5 + i * 7] end
local existing = redis.call('HMGET', jobs, unpack(members))
-- Far jobs (lib.lua): where each id not in `jobs` is, when the shard holds any (one EXISTS for a
-- shard that holds none). far_at[i]: lib.lua's far_where, or nil; far_keys[i]: the index hash
-- of members[i] once computed.
-- On a cluster, the keys of far jobs met here and the lists of groups met below are named in
-- one stop, before the first write (lib.lua's `need`).
defer_needs()
local far_at, far_keys = {}, {}
if far_seen and ((CLUSTER and need({prefix .. 'far'})) or redis.call('EXISTS', prefix .. 'far') == 1) then
  for i = 1, n do
    if not existing[i] then
      far_at[i], far_keys[i] = far_where(prefix, members[i], ARGV[4 + (i - 1) * 7])
    end
  end
end
-- The jobs of blocked workflow steps (in `workflows`, not in `jobs` yet) keep their ids: a push of
-- one is kept (lib.lua's workflows). A shard with no workflow pays one EXISTS.
local stepped = redis.call('EXISTS', prefix .. 'workflows') == 1
  and redis.call('HMGET', prefix .. 'workflows', unpack(members))
-- What this call will write: plan[k] is the job's index in ARGV (false once a later entry for
-- the same id superseded it). Numbers, not a table per job.
local plan, planned = {}, {}
-- Due times by `when` argument, as numbers and as strings: jobs pushed together usually share
-- one, and formatting a number costs more than the rest of a job's Lua work.
local dues, due_strs = {}, {}
-- Where replaced jobs were: was_delayed[member] / was_ready[member] = {topic, id}; revived
-- dead letters by topic. A replaced ready job's entry is left in its list and made stale
-- (lib.lua): O(1), where an LREM would scan the list.
local was_delayed, was_ready, revived = {}, {}, {}
-- Replaced far jobs: where each was, by member.
local was_far = {}
-- Replaced jobs that waited for a slot of their group: {topic, id, group} by member. Replaced
-- jobs that held a slot of another group than the new push's: their ids by topic, and whether
-- each member is one.
local was_parked, switched, switching = {}, {}, {}
-- Kept records of succeeded jobs whose id is pushed again, by topic; whether a topic keeps any.
local undone, has_done = {}, {}
local delayed_left = redis.call('ZCARD', delayed)
-- Topics bounded by max_pending (the `limits` hash): how many more jobs each may take in this
-- shard, read at its first job that would create one (one EXISTS per call for the others).
local limits = prefix .. 'limits'
local bounded = redis.call('EXISTS', limits) == 1
local rooms = {}
local function room_of(topic)
  if not bounded then return false end
  local room = rooms[topic]
  if room == nil then
    room = false
    local share, bound = string.match(redis.call('HGET', limits, topic .. ':max_pending') or '',
      '^(%d+):(%d+)$')
    if share then
      local c = redis.call('HMGET', counts, topic .. ':delayed', topic .. ':inflight', topic .. ':stale')
      local ready_now = redis.call('LLEN', prefix .. 'ready:' .. topic)
        + redis.call('ZCARD', ranked_key(prefix, topic)) - tonumber(c[3] or 0)
        + ((CLUSTER and need({prefix .. 'parked:' .. topic})) or redis.call('ZCARD', prefix .. 'parked:' .. topic))
      local pending = tonumber(c[1] or 0) + tonumber(c[2] or 0) + math.max(ready_now, 0)
      room = {left = tonumber(share) - pending, bound = bound}
    end
    rooms[topic] = room
  end
  return room
end
for i = 0, n - 1 do
  local topic, id, when = ARGV[4 + i * 7], ARGV[5 + i * 7], ARGV[6 + i * 7]
  local member = members[i + 1]
  local code = 1
  local earlier = planned[member]
  -- A kept record of a succeeded job (its envelope stays in `jobs`): pushed again, it is a new
  -- job. Only ids found in `jobs` pay for the look.
  local record = false
  if existing[i + 1] and not earlier then
    local done = prefix .. 'done:' .. topic
    if has_done[topic] == nil then has_done[topic] = redis.call('EXISTS', done) == 1 end
    record = has_done[topic] and redis.call('HEXISTS', done, member) == 1
    -- The count of records taken out (lib.lua), touched before the first write.
    if record then redis.call('EXISTS', done .. ':taken') end
  end
  local far_old = far_at[i + 1]
  local fresh = record or not (existing[i + 1] or far_old)
  local reserved = any_reserved and not earlier and fresh
    and tonumber(redis.call('ZSCORE', unique, member) or 0) or 0
  local fence = ARGV[9 + i * 7]
  local fenced, sched, gen, tick, stored = false
  if fence ~= '' then
    gen, tick, sched = string.match(fence, '^(%d+):(%d+):(.*)$')
    gen, tick = tonumber(gen), tonumber(tick)
    stored = fences[sched]
    if not stored then
      local raw = redis.call('HGET', tick_fence, sched)
      if raw then
        local g, t = string.match(raw, '^(%d+):(%d+)$')
        stored = {tonumber(g), tonumber(t)}
      end
    end
    fenced = stored and (gen < stored[1] or (gen == stored[1] and tick <= stored[2]))
  end
  if fenced and gen < stored[1] then
    code = '5:' .. fmt(stored[1])
  elseif fenced then
    code = 0
  elseif reserved > now then
    code = '4:' .. fmt(reserved - now)
  elseif stepped and stepped[i + 1] and not existing[i + 1] then
    code = 0
  elseif earlier then
    if replace then
      code = 2
      plan[earlier] = false
    else
      code = 0
    end
  elseif far_old then
    if replace then
      code = 2
      was_far[member] = far_old
    else
      code = 0
    end
  elseif not fresh then
    if redis.call('ZSCORE', prefix .. 'dead:' .. topic, member) then
      revived[topic] = revived[topic] or {}
      table.insert(revived[topic], member)
    elseif redis.call('ZSCORE', inflight, member) then
      code = replace and 3 or 0
    elseif not replace then
      code = 0
    else
      code = 2
      if redis.call('ZSCORE', delayed, member) then
        was_delayed[member] = true
      elseif (CLUSTER and need({prefix .. 'parked:' .. topic})) or redis.call('ZSCORE', prefix .. 'parked:' .. topic, id) then
        -- Waiting for a slot of its group: no ready entry to make stale (lib.lua's groups).
        was_parked[member] = {topic, id, group_of(existing[i + 1])}
      else
        was_ready[member] = {topic, id}
      end
      local old_group = not was_parked[member] and group_of(existing[i + 1])
      if old_group and old_group ~= (ARGV[4 + n * 9 + i] or '') then
        local list = switched[topic]
        if not list then
          list = {}
          switched[topic] = list
        end
        list[#list + 1] = id
        switching[member] = true
      end
    end
  end
  -- A job past its topic's max_pending is refused, whether new or a dead letter's id.
  if code == 1 and bounded then
    local room = room_of(topic)
    if room and room.left <= 0 then
      code = '6:' .. room.bound
      local back = revived[topic]
      if back and back[#back] == member then back[#back] = nil end
    elseif room then
      room.left = room.left - 1
    end
  end
  if record and code == 1 then
    undone[topic] = undone[topic] or {}
    table.insert(undone[topic], member)
  end
  if sched and not fenced and (code == 1 or code == 2) then
    fences[sched] = {gen, tick}
  end
  if code == 1 or code == 2 then
    local hold = ARGV[8 + i * 7]
    if hold ~= '0' then
      reserve[#reserve + 1] = member
      reserve[#reserve + 1] = hold
    elseif code == 2 or existing[i + 1] then
      unreserve[#unreserve + 1] = member
    end
    if not dues[when] then
      local due = due_from(when, now)
      dues[when] = due
      due_strs[when] = fmt(due)
    end
    plan[#plan + 1] = i
    planned[member] = #plan
  end
  out[#out + 1] = code
end
local writes, adds, ready_by_topic, delayed_by_topic = {}, {}, {}, {}
-- Priorities (0 for none) of the jobs in ready_by_topic, by topic; the topics to mark ranked.
local levels_by_topic, rank = {}, {}
-- Due grouped jobs by topic ({id, group, priority}: they go in through their groups), and the
-- topics to mark grouped.
local enter_by_topic, grouped = {}, {}
local unready, undelay = {}, {}
-- The jobs that go far (lib.lua's far_plan), and the replaced far jobs that go far again.
local far_jobs, far_again = {}, {}
-- The envelope of a new job (format 2 in lib.lua, 3 with a trace context), built directly:
-- only the due time varies.
local created = ':' .. fmt(now) .. ':'
-- Whether a job fell due before now and the mover has not moved it yet. The grouped jobs due
-- that wait behind it (and the jobs moved into another group) go in line as they arrive: scored
-- now, a microsecond apart in the call's order (the mover reads equal scores in id order), so
-- that the mover lets them in after the jobs that fell due before and in push order.
local mover_behind = before ~= nil and before <= now
local behind_last = nil
local function behind_score()
  behind_last = behind_last and behind_last + 1 or now
  return behind_last
end
for _, i in ipairs(plan) do
  if i then
    local topic, id, when = ARGV[4 + i * 7], ARGV[5 + i * 7], ARGV[6 + i * 7]
    local member = members[i + 1]
    local due_str = due_strs[when]
    local trace = ARGV[4 + n * 7 + i] or ''
    local priority = tonumber(ARGV[4 + n * 8 + i] or '0') or 0
    local group = ARGV[4 + n * 9 + i] or ''
    -- A job new to `jobs` with nothing of its own to keep, due in a far bucket, goes far.
    local bucket = far_on and not existing[i + 1] and trace == '' and priority == 0 and group == ''
      and ARGV[8 + i * 7] == '0' and far_bucket(dues[when], now)
    if bucket then
      far_jobs[#far_jobs + 1] = { topic = topic, member = member, bucket = bucket, due = dues[when],
        element = far_element(ARGV[7 + i * 7], dues[when], now, bucket, id, ARGV[10 + i * 7]),
        index = far_keys[i + 1] or far_index(prefix, member) }
      -- (never a job in `jobs`: not one that was delayed)
      if was_far[member] then
        far_again[member] = true
      else
        delayed_by_topic[topic] = (delayed_by_topic[topic] or 0) + 1
      end
    else
      writes[#writes + 1] = member
      if priority ~= 0 or group ~= '' then
        writes[#writes + 1] = '4:0:' .. ARGV[7 + i * 7] .. created .. due_str .. ':0:' .. #trace .. ':'
          .. fmt(priority) .. ':' .. #group .. ':' .. trace .. group .. ARGV[10 + i * 7]
        if priority ~= 0 then rank[topic] = true end
        if group ~= '' then grouped[topic] = true end
      elseif trace == '' then
        writes[#writes + 1] = '2:0:' .. ARGV[7 + i * 7] .. created .. due_str .. ':0:' .. ARGV[10 + i * 7]
      else
        writes[#writes + 1] = '3:0:' .. ARGV[7 + i * 7] .. created .. due_str .. ':0:' .. #trace .. ':'
          .. trace .. ARGV[10 + i * 7]
      end
      -- A job moved out of the slot of its old group waits in the delayed set, due as pushed,
      -- for the mover to let it into its new one. So does a grouped job due now while jobs
      -- that fell due earlier wait for the mover (it behind: workers down, a reshard): the
      -- mover lets them into their groups in the order they fell due, this one last; and so
      -- do the grouped jobs due now after it in this call.
      local score = dues[when] > now and due_str
      if not score and (switching[member] or (group ~= '' and mover_behind)) then
        score = fmt(behind_score())
        mover_behind = true
      end
      if score then
        adds[#adds + 1] = score
        adds[#adds + 1] = member
        if not was_delayed[member] then
          if not was_far[member] then
            delayed_by_topic[topic] = (delayed_by_topic[topic] or 0) + 1
          end
          delayed_left = delayed_left + 1
        end
      else
        if group ~= '' then
          local list = enter_by_topic[topic]
          if not list then
            list = {}
            enter_by_topic[topic] = list
          end
          list[#list + 1] = {id, group, priority}
        else
          local list = ready_by_topic[topic]
          if not list then
            list = {}
            ready_by_topic[topic] = list
            levels_by_topic[topic] = {}
          end
          list[#list + 1] = id
          levels_by_topic[topic][#list] = priority
        end
        if was_delayed[member] then
          undelay[#undelay + 1] = member
          delayed_by_topic[topic] = (delayed_by_topic[topic] or 0) - 1
        elseif was_far[member] then
          delayed_by_topic[topic] = (delayed_by_topic[topic] or 0) - 1
        end
      end
    end
    if was_ready[member] then unready[#unready + 1] = was_ready[member] end
  end
end
-- Job events: the topics of this call's new jobs that have them on (one HMGET), their streams
-- opened before the first write.
local streams, event_topics, named = {}, {}, {}
for _, i in ipairs(plan) do
  local topic = i and ARGV[4 + i * 7]
  if topic and not named[topic] then
    named[topic] = true
    event_topics[#event_topics + 1] = topic
  end
end
for topic, cap in pairs(events_on(KEYS[9], event_topics)) do
  streams[topic] = events_open(prefix .. 'events:' .. topic, cap)
end
-- Touch every ready list this call writes to before the first write.
for topic in pairs(ready_by_topic) do touch_lanes(prefix, topic) end
-- Groups (lib.lua): the replaced parked jobs, and the plans of the due grouped jobs, read
-- before the first write.
local unparked, group_plans = {}, {}
-- (and, by topic, the same as a set id -> group for plan_leave's `skip`)
local moving = {}
for _, p in pairs(was_parked) do
  local list = unparked[p[1]]
  if not list then
    list = {}
    unparked[p[1]] = list
    moving[p[1]] = {}
  end
  list[#list + 1] = {p[2], p[3] or false}
  moving[p[1]][p[2]] = p[3] or false
end
-- The slots the switched jobs give back (a replace into another group), planned first: the
-- plans of the jobs entering then start from their groups' counts.
-- A parked job this call replaces is not let in by a slot given back here: its entry is
-- taken out of line (it goes in again, or waits, as the new push).
local leave_plans = {}
-- (still in the region of deferred needs opened above: the lists of every grouped topic's
-- groups are named in the same stop as the far jobs' keys)
for topic, list in pairs(unparked) do touch_parked(group_keys(prefix, topic), list) end
for topic, ids in pairs(switched) do leave_plans[topic] = plan_leave(prefix, topic, ids, moving[topic]) end
for topic, list in pairs(enter_by_topic) do
  local leave = leave_plans[topic]
  group_plans[topic] = plan_enter(prefix, topic, list, leave and leave.held)
end
-- Far jobs: the parts and index hashes this call writes, and the parts of the replaced ones,
-- touched before the first write (far_plan also reads when the next move is due).
local far_writing = #far_jobs > 0 and far_plan(prefix, far_jobs)
needs_met()
for _, w in pairs(was_far) do redis.call('EXISTS', w.part) end
-- Phase 2: writes.
if #writes > 0 then redis.call('HSET', jobs, unpack(writes)) end
if #reserve > 0 then redis.call('HSET', unique_for, unpack(reserve)) end
for sched, f in pairs(fences) do
  redis.call('HSET', tick_fence, sched, fmt(f[1]) .. ':' .. fmt(f[2]))
end
if #adds > 0 then redis.call('ZADD', delayed, unpack(adds)) end
-- The replaced ready jobs' entries go stale before their new entries are made.
for _, old in ipairs(unready) do
  invalidate(prefix .. 'gen:' .. old[1], counts, old[1], old[2])
end
local touched = {}
for topic in pairs(rank) do redis.call('HSET', counts, topic .. ':ranked', 1) end
for topic in pairs(grouped) do redis.call('HSET', counts, topic .. ':grouped', 1) end
for topic, gone in pairs(unparked) do unpark(group_keys(prefix, topic, true), gone) end
for topic, leave in pairs(leave_plans) do write_leave(leave, counts, group_plans[topic]) end
for topic, plan in pairs(group_plans) do
  write_enter(plan, counts)
  touched[topic] = true
end
for topic, list in pairs(ready_by_topic) do
  to_ready(prefix, counts, topic, list, rank[topic] and levels_by_topic[topic])
  ring(prefix, topic)
  touched[topic] = true
end
for topic, k in pairs(delayed_by_topic) do
  bump(counts, topic, 'delayed', k)
  touched[topic] = true
end
for topic in pairs(touched) do redis.call('SADD', topics, topic) end
if next(streams) then
  local stamp = fmt(now)
  -- One entry per topic: the ids, no runs yet, the due time of each one that waits.
  local batch = {}
  for _, i in ipairs(plan) do
    local topic = i and ARGV[4 + i * 7]
    if topic and streams[topic] then
      local b = batch[topic]
      if not b then
        b = {ids = {}, runs = {}, dues = {}}
        batch[topic] = b
      end
      local when = ARGV[6 + i * 7]
      b.ids[#b.ids + 1] = ARGV[5 + i * 7]
      b.runs[#b.runs + 1] = 0
      b.dues[#b.dues + 1] = dues[when] > now and due_strs[when] or ''
    end
  end
  for topic, b in pairs(batch) do
    emit_events(streams[topic], 'pushed', b.ids, b.runs, stamp, 'd', b.dues)
  end
end
for _, w in pairs(was_far) do far_blank(w) end
if far_writing then far_write(far_writing, before) end
delayed_left = delayed_left - #undelay
if delayed_left > 0 then out[1] = announce(prefix, delayed, before) end
-- Removals last: each may delete its key, which nothing below uses again.
if #undelay > 0 then redis.call('ZREM', delayed, unpack(undelay)) end
for topic, dead_members in pairs(revived) do
  redis.call('ZREM', prefix .. 'dead:' .. topic, unpack(dead_members))
end
if #unreserve > 0 then redis.call('HDEL', unique_for, unpack(unreserve)) end
-- The index entries of the replaced far jobs that did not go far again.
for member, w in pairs(was_far) do
  if not far_again[member] then far_unindex(w) end
end
-- The replaced parked jobs that were not parked again leave the parked set.
for topic, gone in pairs(unparked) do
  local again = {}
  for _, j in ipairs(group_plans[topic] and group_plans[topic].park or {}) do again[j[1]] = true end
  tidy_parked(group_keys(prefix, topic, true), gone, again, leave_plans[topic])
end
-- The records pushed again go (`done:<topic>` was read for them): one HDEL per hash, last;
-- they are counted as taken out (lib.lua).
for topic, members_done in pairs(undone) do
  local done = prefix .. 'done:' .. topic
  redis.call('HDEL', done, unpack(members_done))
  take_records(select(2, record_keys(done)), members_done)
end
-- Reservations that ended: a bounded batch per push, so the set stays the size of the live ones.
if any_reserved then
  local ended = redis.call('ZRANGEBYSCORE', unique, '-inf', now, 'LIMIT', 0, 100)
  if #ended > 0 then redis.call('ZREM', unique, unpack(ended)) end
end
return out

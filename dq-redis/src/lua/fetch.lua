-- fetch: leases up to n ready jobs of one topic to the caller (the seed's LRANGE+LTRIM, made
-- crash-safe: each job is in the inflight set with a lease deadline before the script returns).
-- One lease token for the whole call, from the shard's counter and clock: the envelopes are returned as
-- they are stored, not read or rewritten here (a crashed run is counted when its lease is
-- reclaimed; an envelope the caller cannot read, it dead-letters with the dead script), but
-- for a job its group's rate holds back (KEYS[17]), whose envelope is rewritten due later.
-- Batched: one HMGET, one HSET and one ZADD for the whole batch (and one HSET per job held
-- back by its group's rate).
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] ready:<topic>  KEYS[4] counts  KEYS[5] paused
-- KEYS[6] leases  KEYS[7] gen:<topic>  KEYS[8] delayed  KEYS[9] fetched:<consumer>
-- KEYS[10] cancels: a cancel asked of a job taken back (its handler never started) follows it,
-- to its new lease, or away when it goes back to ready
-- KEYS[11] events  KEYS[12] events:<topic>: when the topic's job events are on, each job leased
-- anew is announced (`started`, with its run; a job taken back was announced by the fetch whose
-- reply was lost)
-- KEYS[13] limits: the topic's rate limit, `<topic>:rate` -> `<interval>:<tolerance>:<rate>`
-- (us; `home:0:<rate>` in every shard but the first of a namespace of several, which counts
-- the rate for all: ARGV[6]), `<topic>:tat` -> its theoretical arrival time (us; GCRA, as
-- dq_core::Rate explains), `<topic>:hold` -> when a hold ends (us, hold.lua), and
-- `<topic>:running` -> `<limit>:<limit>`: the most of its jobs leased at once (its global
-- concurrency), checked against the topic's inflight count in a namespace of one shard; in one
-- of several, `home:<limit>` in every shard: the first shard counts the slots for all
-- (slots.lua), and no job of the topic is leased without the caller's grant of slots (ARGV[8])
-- KEYS[14] ranked:<topic>: its ready jobs of a priority other than 0 (lib.lua's ready lanes);
-- a fetch takes those above 0 first, then the ready list, then the others
-- KEYS[15] dead:<topic>  KEYS[16] done:<topic>: read to know that a job has no ready entry
-- left when its last stale entry is fetched past (a dead letter, a kept success)
-- KEYS[17] gtat:<topic>: with a group rate (`<topic>:group_rate` in limits, as `<topic>:rate`
-- reads), each group's theoretical arrival time (ZSET group -> us, GCRA) and, as `:<group>`,
-- the due time last given to a job of the group held back (ids and groups hold no ':'); a
-- fetch that looks at grouped jobs drops the times passed. A job whose group has used its rate is not leased: it goes back
-- to the delayed set (`postponed` in its events), due when its group may start again and a
-- turn after the group's job held back before it, keeping its group's slot (lib.lua's groups: its
-- promotion lets it straight back in line). It counts against the fetch's n as the jobs
-- leased do.
-- ARGV[1] topic  ARGV[2] most jobs (at most 1000)  ARGV[3] lease length (us)
-- ARGV[4] this fetch's nonce ('': not recorded)  ARGV[5] nonces of the consumer's earlier
--   fetches whose reply did not arrive, comma-separated
-- ARGV[6] the starts rate_grant.lua granted ('': none asked)  ARGV[7] us until its next start
-- ARGV[8] the slots slots.lua granted ('': none asked)
-- Returns {now_us, token, taken_back, throttled_us, at_capacity, held_back, ready_left, id_1,
-- envelope_1, ...} (ready_left: the entries left in the topic's ready lanes, stale ones
-- included: 0 when this fetch took every job there was), or
-- {'paused'} when the topic is paused (a lost fetch's jobs then go back to the front of the
-- ready list), or {'home', rate, slots, ready}, nothing done, when its rate ('1' or '0') or its
-- global concurrency is counted in the first shard and the call brought no grant of it (ready:
-- how many entries the topic's ready lanes hold, stale ones included: a caller asks this way
-- before it takes starts for a shard whose last fetch found no job left). throttled_us: the rate limit or a hold let out fewer jobs than asked while more
-- are ready, and the next may start in this many us (0: not throttled). at_capacity: 1 when
-- the global concurrency let out fewer than asked while more are ready (the next may start
-- when a lease of the topic ends), else 0.
-- Taking back: a fetch whose reply was lost (a timeout, a dropped connection, Redis stalled
-- with the request in its buffer) leased jobs that nobody runs. Each recorded fetch of a
-- consumer leaves `<nonce>:<token>:<deadline>` in its fetched:<consumer> key (the last eight,
-- expiring after three leases); a later fetch of that consumer naming the nonce as lost finds
-- those jobs (inflight at that deadline, still under that token) and leases them again to
-- itself, first, with no run counted: their handlers never started.
-- Stale entries (lib.lua) are dropped on the way; when a whole batch was stale, the next one
-- is looked at, up to 10 batches, and a topic left with entries is announced again on the
-- `ready` channel so that its consumers come back at once.
local jobs, inflight, ready, counts, leases, gen = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7]
local topic, n, lease_us = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local nonce, record_key = ARGV[4], KEYS[9]
local paused = redis.call('SISMEMBER', KEYS[5], topic) == 1
-- The ready list's length, read before the first write: a trim below may delete the list, and
-- a key read after its deletion aborts the script while its slot migrates (lib.lua). `left`
-- follows what is trimmed off.
local ranked = KEYS[14]
-- How many fields the generations hash has: 0 once it is gone (lib.lua's live_entries then
-- reads no generation).
local gen_fields = redis.call('HLEN', gen)
local list_left, ranked_left = redis.call('LLEN', ready), redis.call('ZCARD', ranked)
local left = list_left + ranked_left
local limit = redis.call('HMGET', KEYS[13], topic .. ':rate', topic .. ':tat', topic .. ':hold',
  topic .. ':running', topic .. ':group_rate')
-- The group rate, its groups' times and the delayed set's earliest, read before the first write.
local g_interval, g_tolerance, delayed_before
if limit[5] then
  local i, t = string.match(limit[5], '^([^:]+):([^:]+):')
  g_interval, g_tolerance = tonumber(i), tonumber(t)
end
if g_interval then
  redis.call('EXISTS', KEYS[17])
  delayed_before = earliest(KEYS[8])
end
-- Global concurrency: this shard's share, and how many of the topic's jobs are leased now.
local share = tonumber(string.match(limit[4] or '', '^(%d+):') or '')
local running = share and tonumber(redis.call('HGET', counts, topic .. ':inflight') or '0') or 0
local interval, tolerance
if limit[1] then
  local i, t = string.match(limit[1], '^([^:]+):([^:]+):')
  interval, tolerance = tonumber(i), tonumber(t)
end
-- A rate over several shards is counted in the namespace's first shard for all of them
-- (rate_grant.lua), and reads `home:` here: no job of the topic starts without the caller's
-- grant (ARGV[6] starts, ARGV[7] us until the next start when it was cut short).
local granted, slot_grant = tonumber(ARGV[6] or ''), tonumber(ARGV[8] or '')
local rate_home = limit[1] and string.sub(limit[1], 1, 5) == 'home:'
local slots_home = limit[4] and string.sub(limit[4], 1, 5) == 'home:'
if not rate_home then granted = nil end
if not slots_home then slot_grant = nil end
if (rate_home and not granted) or (slots_home and not slot_grant) then
  return {'home', rate_home and '1' or '0', slots_home and '1' or '0', left}
end
local tat, hold = tonumber(limit[2] or ''), tonumber(limit[3] or '')
local clock = (interval or hold) and now_us() or 0
-- A handler's hold (hold.lua) in force: nothing of the topic starts before it ends.
local held = hold and hold > clock
local wait = held and hold - clock or 0
-- A throttled consumer comes back when the next job may start, if one is left to start.
local function throttled()
  if wait > 0 and left > 0 then return fmt(math.ceil(wait)) end
  return 0
end
-- The consumer's recorded fetches, and the jobs of those whose reply was lost: those named in
-- ARGV[5], and this very nonce (a cluster client resends a request after a dropped connection:
-- the first copy ran, and its reply is what was lost).
local kept, back = {}, {}
if nonce ~= '' then
  local lost = {[nonce] = true}
  for l in string.gmatch(ARGV[5], '[^,]+') do lost[l] = true end
  for r in string.gmatch(redis.call('GET', record_key) or '', '[^|]+') do
    local rn, rt, rd = string.match(r, '^([^:]+):(%d+):(%d+)$')
    if rn and lost[rn] then
      local found = redis.call('ZRANGEBYSCORE', inflight, rd, rd, 'LIMIT', 0, n + 1)
      local more = #found > n
      if #found > 0 then
        local tokens = redis.call('HMGET', leases, unpack(found))
        for i, m in ipairs(found) do
          if tokens[i] == rt then
            if #back < n then back[#back + 1] = m else more = true end
          end
        end
      end
      if more then kept[#kept + 1] = r end -- more than this call takes: look again next time
    elseif rn then
      kept[#kept + 1] = r
    end
  end
end
local back_cancels = #back > 0 and redis.call('EXISTS', KEYS[10]) == 1
  and redis.call('HMGET', KEYS[10], unpack(back))
-- Job events: the topic's stream, opened before the first write when they are on.
local stream
for _, cap in pairs(events_on(KEYS[11], {topic})) do stream = events_open(KEYS[12], cap) end
-- Puts `members`, jobs a lost fetch leased, back at the front of the ready list, no run
-- counted (as a release does), a cancel asked of them dropped; `wake`: rings the topic's
-- consumers, as a release does. After every read of the keys it writes.
local function back_in_line(members, wake)
  local ids, priorities = {}, {}
  local raws = redis.call('HMGET', jobs, unpack(members))
  for i, member in ipairs(members) do
    ids[i] = string.sub(member, #topic + 2)
    priorities[i] = priority_of(raws[i])
  end
  local prefix = string.sub(ready, 1, #ready - #topic - 6)
  proceed_when_full(leases)
  to_ready(prefix, counts, topic, ids, priorities, true)
  bump(counts, topic, 'inflight', -#members)
  if back_cancels then redis.call('HDEL', KEYS[10], unpack(members)) end
  end_leases(inflight, leases, members)
  left = left + #members
  if wake then ring(prefix, topic) end
end
-- Taken back beyond the slots granted (the lost fetch's grant may have run out since, and its
-- slots gone to others' jobs): those go back in line for a fetch with slots to take them
-- (rung, unless the topic is paused or held: its consumers wait for the resume).
if slot_grant and #back > slot_grant then
  local extra, total = {}, #back
  for i = slot_grant + 1, total do extra[#extra + 1] = back[i] end
  for i = total, slot_grant + 1, -1 do back[i] = nil end
  back_in_line(extra, not (paused or held))
  if back_cancels then
    for i = total, slot_grant + 1, -1 do back_cancels[i] = nil end
  end
end
if paused or held then
  -- Nothing of the topic runs while it is paused or held: what a lost fetch leased goes back
  -- in line for the first fetch after the resume or the hold (no consumer to wake before).
  if #back > 0 then back_in_line(back, false) end
  if paused then return {'paused'} end
  return {fmt(clock), '0', 0, throttled(), 0, 0, math.max(left, 0)}
end
-- The envelopes of the jobs taken back, read before anything is written.
local back_raws = #back > 0 and redis.call('HMGET', jobs, unpack(back)) or {}
local ids, stale = {}, 0
n = n - #back
-- The rate limit: how many may start now (GCRA), and else when the next may. The jobs taken
-- back were counted when they were first leased.
local base = clock
if interval then
  n, wait, base = gcra_take(tat, clock, interval, tolerance, n)
elseif granted then
  -- The jobs taken back use the grant too: a resent copy of this very fetch (the first copy
  -- ran, its reply was lost) takes back what the first leased, under the same grant.
  n = math.max(math.min(n, granted - #back), 0)
  wait = tonumber(ARGV[7] or '') or 0
end
-- Global concurrency: no more leased at once than the limit (the jobs taken back hold their
-- slots), or than the slots granted, which the jobs taken back use too (as the rate's grant).
local capped = 0
if share and running + n > share then
  n = math.max(share - running, 0)
  capped = 1
elseif slot_grant and slot_grant - #back < n then
  n = math.max(slot_grant - #back, 0)
  capped = 1
end
-- At capacity when the cap bit: the fetch took all the room allowed and more are ready (a batch
-- of stale entries that left the room unused is not a full topic).
local function at_capacity(taken)
  if capped == 1 and taken >= n and left > 0 then return 1 end
  return 0
end
-- Up to n entries in fetch order (lib.lua's ready lanes): the ranked set's above priority 0,
-- the list, the set's others; each key read only while it holds entries (a trim that empties
-- one deletes it).
for _ = 1, n > 0 and 10 or 0 do
  local high, low = {}, {}
  if ranked_left > 0 then
    local window = redis.call('ZRANGE', ranked, 0, n - 1, 'WITHSCORES')
    for i = 1, #window, 2 do
      if tonumber(window[i + 1]) < RANKED_MID then high[#high + 1] = window[i] else low[#low + 1] = window[i] end
    end
  end
  local entries, from_ranked = {}, #high
  for i, e in ipairs(high) do entries[i] = e end
  local from_list = 0
  if #entries < n and list_left > 0 then
    for _, e in ipairs(redis.call('LRANGE', ready, 0, n - #entries - 1)) do
      entries[#entries + 1] = e
      from_list = from_list + 1
    end
  end
  for i = 1, math.min(#low, n - #entries) do
    entries[#entries + 1] = low[i]
    from_ranked = from_ranked + 1
  end
  if #entries == 0 then break end
  if from_list > 0 then redis.call('LTRIM', ready, from_list, -1) end
  if from_ranked > 0 then redis.call('ZREMRANGEBYRANK', ranked, 0, from_ranked - 1) end
  list_left, ranked_left = list_left - from_list, ranked_left - from_ranked
  left = list_left + ranked_left
  local live, dropped, with_gen, stale_ids = live_entries(gen, entries, gen_fields == 0)
  ids = live
  stale = stale + dropped
  -- The generations these entries settle (lib.lua), read first and written after, every HDEL
  -- last: it may delete the hash, which no later batch then reads (`gen_fields` follows how
  -- many fields it has). A job's stale entries leave the lanes one by one (`id:` counts those
  -- left); its generation goes once none is left and it has no live entry waiting either:
  -- its live entry is in this batch, or it is gone, delayed, running, dead or done. Else it stays, to keep
  -- the stale entries stale: a replace that raised a job's priority put its new entry in a
  -- lane fetched before its old one's.
  if gen_fields > 0 and (#stale_ids > 0 or #with_gen > 0) then
    local fields, distinct, seen_id = {}, {}, {}
    for _, list in ipairs({stale_ids, with_gen}) do
      for _, id in ipairs(list) do
        if not seen_id[id] then
          seen_id[id] = true
          distinct[#distinct + 1] = id
          fields[#fields + 1] = id .. ':'
        end
      end
    end
    local stale_left = {}
    for i, n_left in ipairs(redis.call('HMGET', gen, unpack(fields))) do
      stale_left[distinct[i]] = tonumber(n_left or '0')
    end
    local counted = {}
    for _, id in ipairs(stale_ids) do
      stale_left[id] = stale_left[id] - 1
      counted[id] = true
    end
    local live_here = {}
    for _, id in ipairs(with_gen) do live_here[id] = true end
    local updates, drops = {}, {}
    for _, id in ipairs(distinct) do
      if stale_left[id] > 0 then
        if counted[id] then push_all_pairs(updates, id .. ':', fmt(stale_left[id])) end
      else
        local member = topic .. ':' .. id
        if live_here[id] or redis.call('HEXISTS', jobs, member) == 0
          or redis.call('ZSCORE', KEYS[8], member) or redis.call('ZSCORE', inflight, member)
          or redis.call('ZSCORE', KEYS[15], member) or redis.call('HEXISTS', KEYS[16], member) == 1 then
          drops[#drops + 1] = id
        end
        drops[#drops + 1] = id .. ':'
      end
    end
    if #updates > 0 then redis.call('HSET', gen, unpack(updates)) end
    if #drops > 0 then gen_fields = gen_fields - redis.call('HDEL', gen, unpack(drops)) end
  end
  if #ids > 0 then break end
end
if stale > 0 then
  bump(counts, topic, 'stale', -stale)
  if #ids == 0 and left > 0 then
    ring(string.sub(ready, 1, #ready - #topic - 6), topic)
  end
end
if #ids == 0 and #back == 0 then
  return {fmt(now_us()), '0', 0, throttled(), at_capacity(0), 0, math.max(left, 0)}
end
proceed_when_full(leases) -- leasing moves jobs (ready to inflight): allowed when Redis is full
local now = now_us()
-- ':next' cannot be a member: every member has a topic before its colon. A token is never
-- below the shard's clock: a failover that rolls the counter back (the replica had not
-- received the last fetches) cannot hand a lost lease's token out again, as long as the new
-- master's clock is not behind the old one's by more than the failover took.
-- ':table' keeps the hash a hash table: Redis keeps a hash of up to 512 small fields as one
-- packed list (its default hash-max-listpack-entries) and scans it at every HGET, HSET and HDEL,
-- and this hash holds a lease per running job (hundreds): a value longer than 64 bytes (its
-- hash-max-listpack-value) turns it into a table for good, as both fields stay.
local counter = redis.call('HMGET', leases, ':next', ':table')
local token = fmt(math.max(tonumber(counter[1] or '0') + 1, now))
if counter[2] then
  redis.call('HSET', leases, ':next', token)
else
  redis.call('HSET', leases, ':next', token, ':table', LEASES_AS_TABLE)
end
local out = {fmt(now), token, 0, throttled(), at_capacity(#ids), 0, 0}
local deadline = fmt(now + lease_us)
local held, deadlines = {}, {'+inf', INFLIGHT_AS_SKIPLIST}
-- Taken back from a lost fetch: leased again to this one, first in line; no run counted.
for i, member in ipairs(back) do
  if back_raws[i] then
    held[#held + 1] = member
    held[#held + 1] = token
    deadlines[#deadlines + 1] = deadline
    deadlines[#deadlines + 1] = member
    out[#out + 1] = string.sub(member, #topic + 2)
    out[#out + 1] = back_raws[i]
    if back_cancels and back_cancels[i] then redis.call('HSET', KEYS[10], member, token) end
  end
end
local taken = #held / 2
out[3] = taken
local members = {}
for i, id in ipairs(ids) do members[i] = topic .. ':' .. id end
local raws = #members > 0 and redis.call('HMGET', jobs, unpack(members)) or {}
-- The group rate: a job whose group has used it goes back to wait (`later`), the others count
-- against their groups' times (`tats`, written below).
local later, tats, last_due, held_back = {}, {}, {}, 0
if g_interval and #ids > 0 then
  local groups, names, seen = {}, {}, {}
  for i = 1, #ids do
    local g = group_of(raws[i])
    groups[i] = g
    if g and not seen[g] then
      seen[g] = true
      names[#names + 1] = g
    end
  end
  if #names > 0 then
    local fields = {}
    for x, g in ipairs(names) do
      fields[x] = g
      fields[#names + x] = ':' .. g
    end
    local scores = redis.call('ZMSCORE', KEYS[17], unpack(fields))
    for x, g in ipairs(names) do
      tats[g] = tonumber(scores[x] or 0)
      last_due[g] = tonumber(scores[#names + x] or 0)
    end
    for i = 1, #ids do
      local g = groups[i]
      if g then
        local base = math.max(tats[g], now)
        local room = now + g_tolerance - base
        local e = room < 0 and parse(raws[i])
        if e then
          -- (an envelope this script cannot read is leased: its worker dead-letters it.)
          -- Due at the group's next turn, and a turn after the job of the group held back
          -- last: equal times would be promoted in the order of their ids, and held back again
          -- together at each turn.
          local due = math.max(math.ceil(now - room), math.ceil(last_due[g] + g_interval))
          last_due[g] = due
          later[i] = {due, e}
          raws[i] = nil
          held_back = held_back + 1
        else
          tats[g] = base + g_interval
        end
      end
    end
  end
end
-- The room the jobs held back took is not a full topic, nor the starts they left unused a
-- throttled one.
out[5] = at_capacity(#ids - held_back)
if held_back > 0 then out[4] = 0 end
out[6] = held_back
out[7] = math.max(left, 0)
-- Filled by count: `#t + 1` would search for the end of each list at every job.
local nh, nd, no = #held, #deadlines, #out
for i, id in ipairs(ids) do
  local raw = raws[i]
  -- An id without an envelope was cancelled while it waited: nothing to run.
  if raw then
    local member = members[i]
    held[nh + 1], held[nh + 2] = member, token
    deadlines[nd + 1], deadlines[nd + 2] = deadline, member
    out[no + 1], out[no + 2] = id, raw
    nh, nd, no = nh + 2, nd + 2, no + 2
  end
end
if next(later) then
  -- Back to wait for their groups' turns, their envelopes due then (a status shows when).
  local back_later, moved = {}, 0
  for i = 1, #ids do
    local wait = later[i]
    local e = wait and wait[2]
    if e then
    e.due = wait[1]
    redis.call('HSET', jobs, members[i], encode(e))
    push_all_pairs(back_later, fmt(e.due), members[i])
    moved = moved + 1
    if stream then emit_event(stream, 'postponed', ids[i], e.attempt + 1, fmt(now), 'd', fmt(e.due)) end
    end
  end
  redis.call('ZADD', KEYS[8], unpack(back_later))
  bump(counts, topic, 'delayed', moved)
  announce(string.sub(ready, 1, #ready - #topic - 6), KEYS[8], delayed_before)
end
if #held == 0 and left > 0 then
  -- Every live entry of the batch named a job that is gone: none leased, but jobs are left,
  -- for which its consumers come back at once rather than after their idle wait.
  ring(string.sub(ready, 1, #ready - #topic - 6), topic)
end
if #held > 0 then
  redis.call('HSET', leases, unpack(held))
  redis.call('ZADD', inflight, unpack(deadlines))
  bump(counts, topic, 'inflight', #held / 2 - taken) -- the taken back ones were counted
  if interval and #held / 2 > taken then
    redis.call('HSET', KEYS[13], topic .. ':tat', string.format('%.3f', base + (#held / 2 - taken) * interval))
  end
end
if g_interval then
  -- The groups' times, then those past dropped (last: it may delete the set).
  local scored = {}
  for g, tat in pairs(tats) do
    if tat > now then push_all_pairs(scored, string.format('%.3f', tat), g) end
  end
  for g, due in pairs(last_due) do
    if due > now then push_all_pairs(scored, fmt(due), ':' .. g) end
  end
  if #scored > 0 then redis.call('ZADD', KEYS[17], unpack(scored)) end
  redis.call('ZREMRANGEBYSCORE', KEYS[17], '-inf', now)
end
if stream then
  local stamp = fmt(now)
  local started, runs = {}, {}
  for i, id in ipairs(ids) do
    if raws[i] then
      started[#started + 1] = id
      runs[#runs + 1] = next_run_text(raws[i])
    end
  end
  emit_events(stream, 'started', started, runs, stamp)
end
if nonce ~= '' then
  local record = nonce .. ':' .. token .. ':' .. deadline
  for i = 1, math.min(#kept, 7) do record = record .. '|' .. kept[i] end
  redis.call('SET', record_key, record, 'PX', math.floor(lease_us * 3 / 1000))
end
return out

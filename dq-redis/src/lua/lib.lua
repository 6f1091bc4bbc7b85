-- Helpers prepended to every dq script (see dq-redis/src/scripts.rs).
-- The rule every script keeps: it reads (touches) each key it will write before its first write,
-- and never uses a key after a write that may have deleted it. On a cluster whose slot is
-- migrating, Redis aborts a script at the first key the node no longer holds, keeping what the
-- script wrote until then; a script that aborts before its first write changed nothing, and dq
-- retries it once the slot has moved (RELIABILITY.md, review findings of issue 15, finding 1).
-- Envelope formats 2, 3 and 4 (envelope.rs has the same parser):
--   2:<attempt>:<max_attempts>:<created_us>:<due_us>:<err_len>:<err><payload>
--   3:<attempt>:<max_attempts>:<created_us>:<due_us>:<err_len>:<trace_len>:<err><trace><payload>
--   4:<attempt>:<max_attempts>:<created_us>:<due_us>:<err_len>:<trace_len>:<priority>:<group_len>:<err><trace><group><payload>
-- Format 4 is written only for a job with a priority other than 0 or a group, format 3 for one
-- that carries a trace context (the `otel` feature) and neither; encode keeps all three through
-- every rewrite, and writes a job with none as format 2, which every release reads.
-- <err> of a job whose runs failed is `<last error>\0<entries>`: the errors of its failed runs
-- after a NUL byte (`failed_run`), inside the field, so that every format and release reads it.
-- attempt counts runs that ended without success; a running job is on run attempt + 1. A fetch
-- does not rewrite the envelope: the lease token lives in the shard's `leases` hash.
-- Times are integer microseconds from Redis TIME: workers' clocks never decide when a job is due.
-- Numbers go out through fmt(): Lua's tostring would print large ones in exponent form. Scores
-- go to ZADD as strings on the hot paths: Redis prints a Lua number argument with %.17g, exact but
-- slow.

-- Redis at maxmemory (noeviction) refuses a script whose first write may grow memory (ZADD, HSET,
-- RPUSH, HINCRBY...), and lets a script that has written go on. The scripts that keep the jobs
-- Redis holds moving while it is full (renewals, acks, retries, dead letters, reclaims,
-- promotions, releases: they move or free memory and add no job) call this right before their
-- first write: a write that changes nothing, cannot grow memory, and is not replicated. Pushes
-- stay refused. Its field is never a member (members are topic:id).
local function proceed_when_full(key)
  redis.call('HDEL', key, '')
end

-- The value of the `leases` hash's `:table` field (fetch.lua): longer than the 64 bytes of a
-- small hash's values (Redis' default hash-max-listpack-value), so the hash is a hash table.
local LEASES_AS_TABLE = 'this field keeps the leases hash a hash table, whose lookups do not scan it (fetch.lua)'

-- A member of the `inflight` set scored +inf (fetch.lua adds it first in each ZADD of leases),
-- longer than the 64 bytes of a small sorted set's members (Redis' default
-- zset-max-listpack-value; 128 and more are accepted here too): the set is a skip list from its
-- first member and for good (the member keeps it from emptying). Packed, a ZADD scans it for
-- each member it inserts: a fetch of 120 jobs cost 5.0 us of Redis time a job against 0.63.
-- Not a job: it has no topic before its colon, never expires (reclaim reads up to now) and is
-- not listed (list.lua keeps the members of the topic asked for).
local INFLIGHT_AS_SKIPLIST = ':skiplist this member keeps the inflight set a skip list, whose inserts do not scan it, whatever the number of running jobs (fetch.lua)'

-- On a Redis Cluster a script must declare every key it touches. While dq's slot moves between
-- two nodes, Redis runs a call only on a node that holds every key it declares (TRYAGAIN while
-- they are split, ASK to the new node once they are all there), and a key it did not declare
-- reads there as the node has it: empty on the new node until it moves (issue 33). Some keys a
-- call names from what it reads (a group's list, from the group of a job it meets): `need`
-- stops the call with the error `DQKEYS <key> ...` naming those it did not declare, and the
-- caller calls again with them declared (RedisStore::run). Called before the first write only,
-- like the touches above. CLUSTER is set by scripts.rs (true in the scripts run on a cluster):
-- on one Redis, nothing is checked.
-- A loop that would stop once per topic or workflow it meets (an ack of jobs of several
-- grouped topics or workflows) names them all in one stop instead: between `defer_needs()` and
-- `needs_met()`, `need_soon` records the keys it lacks and answers false (its caller then
-- touches none of them), and `needs_met` stops the call with every key recorded.
local declared_keys
local need_missing, need_named, need_deferred = {}, {}, false
local function all_declared(keys)
  if not CLUSTER then return true end
  if not declared_keys then
    declared_keys = {}
    for _, key in ipairs(KEYS) do declared_keys[key] = true end
  end
  for _, key in ipairs(keys) do
    if not declared_keys[key] then return false end
  end
  return true
end

local function need_raise(keys)
  local missing = {}
  for _, key in ipairs(keys) do
    if not declared_keys[key] then missing[#missing + 1] = key end
  end
  for _, key in ipairs(need_missing) do missing[#missing + 1] = key end
  -- A text, not an error table: Redis 6.2 passes on only a text raised by a script.
  error('DQKEYS ' .. table.concat(missing, ' '))
end

local function need(keys)
  if not all_declared(keys) then need_raise(keys) end
end

local function need_soon(keys)
  if all_declared(keys) then return true end
  if not need_deferred then need_raise(keys) end
  for _, key in ipairs(keys) do
    -- Once each (an ack of many steps of one workflow meets its key at each).
    if not declared_keys[key] and not need_named[key] then
      need_named[key] = true
      need_missing[#need_missing + 1] = key
    end
  end
  return false
end

local function defer_needs()
  need_deferred = CLUSTER
end

local function needs_met()
  need_deferred = false
  if #need_missing > 0 then need_raise({}) end
end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- '%d' prints any integer below 2^53 exactly, at half the cost of '%.0f' (measured in Redis 7.0's
-- Lua: 0.24 against 0.50 us per number).
local function fmt(n)
  return string.format('%d', n)
end

-- A topic's rate (GCRA, as dq_core::Rate explains; fetch.lua for the first shard's own jobs,
-- rate_grant.lua for a fetch in another shard): of `want` starts at `clock` (us), with an
-- `interval` and a `tolerance` (us) and the theoretical arrival time `tat` (nil: none yet),
-- how many may start now, how long until the next may when fewer than wanted (us; 0
-- otherwise), and the time the starts count from: the new `tat` is `base + allowed * interval`.
local function gcra_take(tat, clock, interval, tolerance, want)
  local base = math.max(tat or 0, clock)
  local room = clock + tolerance - base
  if room < 0 then return 0, -room, base end
  local allowed = math.floor(room / interval) + 1
  if allowed >= want then return want, 0, base end
  return allowed, base + allowed * interval - tolerance - clock, base
end

local function parse(raw)
  if not raw then return nil end
  local v, a, m, c, d, el, pos = string.match(raw, '^([234]):(%d+):(%d+):(%d+):(%d+):(%d+):()')
  if not v then return nil end
  local tl, priority, gl = 0, 0, 0
  if v ~= '2' then
    local t, after = string.match(raw, '^(%d+):()', pos)
    if not t then return nil end
    tl, pos = tonumber(t), after
  end
  if v == '4' then
    local p, g, after = string.match(raw, '^(%-?%d+):(%d+):()', pos)
    if not p then return nil end
    priority, gl, pos = tonumber(p), tonumber(g), after
  end
  el = tonumber(el)
  if #raw < pos + el + tl + gl - 1 then return nil end
  -- The last error, and after a NUL byte the errors of the failed runs (`failed_run`).
  local err, history = string.sub(raw, pos, pos + el - 1), ''
  local nul = el > 0 and string.find(err, '\0', 1, true)
  if nul then err, history = string.sub(err, 1, nul - 1), string.sub(err, nul + 1) end
  return { attempt = tonumber(a), max = tonumber(m), created = tonumber(c), due = tonumber(d),
           err = err, history = history, trace = string.sub(raw, pos + el, pos + el + tl - 1),
           priority = priority, group = string.sub(raw, pos + el + tl, pos + el + tl + gl - 1),
           payload = string.sub(raw, pos + el + tl + gl) }
end

-- Format 4 when the job has a priority (`e.priority`, absent or 0 in envelopes built here) or
-- a group (`e.group`, absent or ''), else format 3 when it carries a trace context (`e.trace`), else format 2.
local function encode(e)
  local err = e.err or ''
  if e.history and e.history ~= '' then err = err .. '\0' .. e.history end
  local head = fmt(e.attempt) .. ':' .. fmt(e.max) .. ':' .. fmt(e.created) .. ':' .. fmt(e.due) .. ':'
    .. #err .. ':'
  local trace, group = e.trace or '', e.group or ''
  if (e.priority and e.priority ~= 0) or group ~= '' then
    return '4:' .. head .. #trace .. ':' .. fmt(e.priority or 0) .. ':' .. #group .. ':' .. err
      .. trace .. group .. e.payload
  end
  if trace ~= '' then
    return '3:' .. head .. #trace .. ':' .. err .. trace .. e.payload
  end
  return '2:' .. head .. err .. e.payload
end

-- The errors of a job's failed runs (envelope.rs, `Envelope::errors`): the latest
-- HISTORY_KEPT, each entry `<run>:<us>:<len>:<text>` (its text the run's error up to
-- HISTORY_TEXT bytes, cut at a character's start), kept in the envelope's error field after the last error and a NUL byte, so
-- that a release that does not know of them reads the job still, and they go with the job
-- whatever deletes it.
local HISTORY_KEPT, HISTORY_TEXT = 10, 1024

-- Run `run` failed with `err` at `now` (us): `e`'s last error, and the latest entry of its
-- history (the oldest dropped past HISTORY_KEPT). A NUL byte in the error becomes `?` (the
-- byte that ends the last error in the field).
local function failed_run(e, err, run, now)
  err = string.gsub(err, '%z', '?')
  e.err = err
  -- Cut at a character's start: a byte 0x80-0xBF after the cut continues a UTF-8 character.
  local cut = math.min(#err, HISTORY_TEXT)
  while cut > 0 and cut < #err and string.byte(err, cut + 1) >= 128
    and string.byte(err, cut + 1) < 192 do
    cut = cut - 1
  end
  local text = string.sub(err, 1, cut)
  local entries, pos, h = {}, 1, e.history or ''
  while pos <= #h do
    local len, after = string.match(h, '^%d+:%d+:(%d+):()', pos)
    if not len then break end
    local stop = after + tonumber(len)
    entries[#entries + 1] = string.sub(h, pos, stop - 1)
    pos = stop
  end
  entries[#entries + 1] = fmt(run) .. ':' .. fmt(now) .. ':' .. #text .. ':' .. text
  e.history = table.concat(entries, '', math.max(#entries - HISTORY_KEPT + 1, 1))
end

-- The priority of a stored envelope (0 without one, or for one that cannot be read).
local function priority_of(raw)
  return raw and tonumber(string.match(raw, '^4:%d+:%d+:%d+:%d+:%d+:%d+:(%-?%d+):') or '0') or 0
end

-- Ends leases: the jobs leave the inflight set and their tokens are forgotten.
local function end_leases(inflight, leases, members)
  redis.call('ZREM', inflight, unpack(members))
  redis.call('HDEL', leases, unpack(members))
end

-- Progress (progress.lua): the `progress` hash holds the latest progress of running jobs, and a
-- job's entry goes when it leaves running. A script that ends leases calls `has_progress` before
-- its first write (the touch lib.lua's rule asks for; nothing to clear when the hash is absent,
-- as it is while no job reports progress), then `clear_progress` after its writes: the HDEL may
-- delete the key, so nothing uses it after.
local function has_progress(progress)
  return redis.call('EXISTS', progress) == 1
end

local function clear_progress(progress, members)
  redis.call('HDEL', progress, unpack(members))
end

-- The topic of a `topic:id` member (one string made, not two).
local function topic_of(member)
  local colon = string.find(member, ':', 1, true)
  if not colon then return nil end
  return string.sub(member, 1, colon - 1)
end

local function split_member(member)
  local colon = string.find(member, ':', 1, true)
  if not colon then return nil end
  return string.sub(member, 1, colon - 1), string.sub(member, colon + 1)
end

local function bump(counts, topic, state, n)
  if n ~= 0 then redis.call('HINCRBY', counts, topic .. ':' .. state, n) end
end

-- Throughput: per topic, how many runs ended done or failed in each of the last 60 minutes, kept
-- in the counts hash as a ring of 60 one-minute slots (`<topic>:minute@<slot>` holds the minute a
-- slot counts, `<topic>:done@<slot>` and `<topic>:failed@<slot>` its tallies): at most 180 fields
-- per topic and shard, whatever the traffic. throughput.lua reads them.
local function tally(counts, topic, what, n, now)
  local minute = math.floor(now / 60000000)
  local slot = minute % 60
  local stamp = topic .. ':minute@' .. slot
  if tonumber(redis.call('HGET', counts, stamp) or -1) ~= minute then
    redis.call('HSET', counts, stamp, fmt(minute), topic .. ':done@' .. slot, 0, topic .. ':failed@' .. slot, 0)
  end
  redis.call('HINCRBY', counts, topic .. ':' .. what .. '@' .. slot, n)
end

local function earliest(delayed)
  local first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
  if first[2] then return tonumber(first[2]) end
  return nil
end

-- RPUSH/LPUSH a list of values in bounded chunks (Lua's unpack is limited to a few thousand).
local function push_all(cmd, key, values)
  local i = 1
  while i <= #values do
    local j = math.min(i + 999, #values)
    redis.call(cmd, key, unpack(values, i, j))
    i = j + 1
  end
end

-- HMGET of any number of fields, 1000 at a time (Lua's unpack is limited to a few thousand).
local function read_many(cmd, key, fields)
  local out = {}
  local i = 1
  while i <= #fields do
    local j = math.min(i + 999, #fields)
    local got = redis.call(cmd, key, unpack(fields, i, j))
    for x = i, j do out[x] = got[x - i + 1] end
    i = j + 1
  end
  return out
end

local function hmget_all(key, fields)
  return read_many('HMGET', key, fields)
end

-- Tells the processes waiting on this shard that `topic` has ready jobs (consumers on a Redis
-- Cluster wait for this message instead of holding a blocking connection per topic and
-- shard). Once per topic per script call.
local rung = {}
local function ring(prefix, topic)
  if not rung[topic] then
    rung[topic] = true
    redis.call('PUBLISH', prefix .. 'ready', topic)
  end
end

-- Ready-list entries. An entry is a job id, or `id:<g>` once the job has a generation in its
-- topic's `gen:<topic>` hash. A replace, cancel or reschedule of a ready job does not take its
-- entry out of the list (an LREM scans the list: 200 replaces at the tail of 200,000 ready jobs
-- held Redis for 1.3 s); it bumps the job's generation instead (O(1)), which makes the entry
-- stale, and a new entry, if any, carries the new generation. An entry is live when its
-- generation is the job's current one (0 when it has none); fetch, list and stats skip the
-- others, and `<topic>:stale` in the counts hash says how many there are. Ids cannot hold ':'.
local function entry_parts(entry)
  local id, g = string.match(entry, '^(.-):(%d+)$')
  if id then return id, tonumber(g) end
  return entry, 0
end

-- The entries to push for `ids`: `id:<g>` for the jobs that have a generation.
local function entries_for(gen, ids)
  if redis.call('EXISTS', gen) == 0 then return ids end
  local out = {}
  for k, g in ipairs(hmget_all(gen, ids)) do
    if g then out[k] = ids[k] .. ':' .. g else out[k] = ids[k] end
  end
  return out
end

-- Makes the ready entry of a job stale: the job left the ready list without being fetched.
-- Beside the generation (field `id`), the hash counts the job's stale entries still in the list
-- (field `id:`, not an id: ids hold no ':'); the generation may be forgotten only once none is
-- left, or an old `id:<g>` entry would come back to life when the generation counts up again.
local function invalidate(gen, counts, topic, id)
  redis.call('HINCRBY', gen, id, 1)
  redis.call('HINCRBY', gen, id .. ':', 1)
  bump(counts, topic, 'stale', 1)
end

-- Which of `entries` (of one topic) are live: returns the live ids in order, how many entries
-- were stale, the ids whose live entry carried a generation (it is forgotten once the job
-- leaves the list) and the ids of stale entries. `absent`: the caller knows the generations
-- hash is gone (it deleted it), so it is not read (a key read after its deletion aborts the
-- script while its slot migrates).
local function live_entries(gen, entries, absent)
  if #entries == 0 then return entries, 0, {}, {} end
  local marked = false
  for _, e in ipairs(entries) do
    if string.find(e, ':', 1, true) then marked = true break end
  end
  if not marked and (absent or redis.call('EXISTS', gen) == 0) then return entries, 0, {}, {} end
  local ids, gs = {}, {}
  for k, e in ipairs(entries) do ids[k], gs[k] = entry_parts(e) end
  local current = absent and {} or redis.call('HMGET', gen, unpack(ids))
  local live, with_gen, stale_ids, seen = {}, {}, {}, {}
  for k, id in ipairs(ids) do
    local cur = tonumber(current[k] or 0)
    if gs[k] == cur and not seen[id] then
      seen[id] = true
      live[#live + 1] = id
      if cur > 0 then with_gen[#with_gen + 1] = id end
    else
      stale_ids[#stale_ids + 1] = id
    end
  end
  return live, #stale_ids, with_gen, stale_ids
end

-- Ready lanes. A ready job of priority 0 waits in its topic's list `ready:<topic>` (first in,
-- first out), a job of any other priority in the sorted set `ranked:<topic>`, scored so that
-- the set's order is the fetch order: higher priority first and, within a priority, the job
-- that became ready first. Fetches take the set's jobs of a priority above 0 first (scores below
-- RANKED_MID), then the list, then the set's others. A score is
-- (MAX_PRIORITY - priority) * LANE + LANE / 2 + seq for a job going last of its priority, - seq
-- for one going first (released or reclaimed: one call's last goes first, as one LPUSH does),
-- seq counting up per topic (`<topic>:seq` in the counts hash): exact integers below 2^53 (LANE
-- / 2 = 2^46 jobs each way: 22 years of 100,000 ranked jobs a second in one topic and shard). The
-- set's members are ready entries as the list's (`id` or `id:<g>`), stale by the same rules.
-- A topic whose jobs have priorities is marked `<topic>:ranked` in the counts hash (push.lua),
-- so that promote.lua reads the envelopes of its jobs for their priority, and only its.
local LANE = 140737488355328 -- 2^47: 21 lanes stay below 2^53, each counting 2^46 jobs each way
local MAX_PRIORITY = 10
local RANKED_MID = MAX_PRIORITY * LANE

local function ranked_key(prefix, topic)
  return prefix .. 'ranked:' .. topic
end

-- Touches both lanes of a topic, before a script's first write (this file's rule).
local function touch_lanes(prefix, topic)
  local ready, ranked = prefix .. 'ready:' .. topic, ranked_key(prefix, topic)
  if CLUSTER then need({ready, ranked, prefix .. 'gen:' .. topic}) end
  redis.call('LLEN', ready)
  redis.call('EXISTS', ranked)
end

-- Makes the jobs `ids` of `topic` ready: last of their priorities, or first when `front`.
-- `priorities[i]` is job i's (nil, or no table: 0, the list). Does not ring (the caller does,
-- when consumers may start them).
local function to_ready(prefix, counts, topic, ids, priorities, front)
  local plain, ranked, levels = ids, {}, {}
  if priorities then
    plain = {}
    for i, id in ipairs(ids) do
      local p = priorities[i] or 0
      if p == 0 then
        plain[#plain + 1] = id
      else
        ranked[#ranked + 1] = id
        levels[#levels + 1] = p
      end
    end
  end
  local gen = prefix .. 'gen:' .. topic
  if #plain > 0 then push_all(front and 'LPUSH' or 'RPUSH', prefix .. 'ready:' .. topic, entries_for(gen, plain)) end
  if #ranked == 0 then return end
  local entries = entries_for(gen, ranked)
  local last = redis.call('HINCRBY', counts, topic .. ':seq', #ranked)
  local args = {}
  for i, entry in ipairs(entries) do
    local seq = last - #ranked + i
    if front then seq = -seq end
    args[#args + 1] = fmt((MAX_PRIORITY - levels[i]) * LANE + LANE / 2 + seq)
    args[#args + 1] = entry
  end
  -- push_all's chunks of 1000 values keep each score with its entry.
  push_all('ZADD', ranked_key(prefix, topic), args)
end

-- The entries at positions `start` to `stop` (from 0) of a topic's ready jobs in fetch order
-- (read-only): the ranked set's above priority 0, the list, the set's others.
local function lane_range(ready, ranked, start, stop)
  local out = {}
  local high = redis.call('ZCOUNT', ranked, '-inf', '(' .. fmt(RANKED_MID))
  if start < high then
    for _, e in ipairs(redis.call('ZRANGE', ranked, start, math.min(stop, high - 1))) do out[#out + 1] = e end
  end
  if stop < high then return out end
  local listed = redis.call('LLEN', ready)
  local from = math.max(start - high, 0)
  if from < listed then
    for _, e in ipairs(redis.call('LRANGE', ready, from, stop - high)) do out[#out + 1] = e end
  end
  local low_from = math.max(start - listed, high)
  if stop - listed >= low_from then
    for _, e in ipairs(redis.call('ZRANGE', ranked, low_from, stop - listed)) do out[#out + 1] = e end
  end
  return out
end

-- Puts a job where its due time says: ready (in the lane of its `priority`) when due, else the
-- delayed set.
local function place(prefix, delayed, counts, member, topic, id, due, now, priority)
  if due <= now then
    to_ready(prefix, counts, topic, {id}, {priority})
    ring(prefix, topic)
  else
    redis.call('ZADD', delayed, due, member)
    bump(counts, topic, 'delayed', 1)
  end
end

-- Tells every process's mover when a job became the earliest one (Redisson's trick): `first`
-- is the earliest due time now, `before` the one before the call's writes (nil: none).
local function announce_first(prefix, first, before)
  if first and (not before or first < before) then
    redis.call('PUBLISH', prefix .. 'wake', fmt(first))
    return first
  end
  return -1
end

local function announce(prefix, delayed, before)
  return announce_first(prefix, earliest(delayed), before)
end

local function due_from(when, now)
  local sign = string.sub(when, 1, 1)
  if sign == '+' then return now + tonumber(string.sub(when, 2)) end
  return tonumber(when)
end


-- A schedule's next tick in schedule_next: '' removes it (paused, or no tick to come). A ZREM
-- may delete the key: call this after every other use of it.
local function set_next(schedule_next, id, tick)
  if tick == '' then
    redis.call('ZREM', schedule_next, id)
  else
    redis.call('ZADD', schedule_next, tick, id)
  end
end

-- Starts a schedule's next generation: above its last, and Redis' clock (us) unless the clock
-- went back, so one removed and declared again also starts above every generation it had.
local function new_generation(schedule_gen, id)
  local gen = math.max(tonumber(redis.call('HGET', schedule_gen, id) or 0) + 1, now_us())
  redis.call('HSET', schedule_gen, id, fmt(gen))
  return gen
end

-- Marks job `member` cancelled at `now` in `key` (cancelled:<topic>) for the waits that come
-- after, when its topic keeps its ends (`spec`: its retention, `<age us>:<count>`, or nil), and
-- drops the marks past the retention: two range removals on a set the retention bounds. The
-- key was touched before the script's first write; nothing uses it after.
local function bury(key, member, spec, now)
  local age, count = string.match(spec or '', '^(%d+):(%d+)$')
  if not age then return end
  redis.call('ZADD', key, fmt(now), member)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. fmt(now - tonumber(age)))
  -- (at least the mark just made stays, as the ack keeps at least one record: the key is never
  -- deleted here, so a second bury in the same call finds it)
  redis.call('ZREMRANGEBYRANK', key, 0, -(math.max(tonumber(count), 1) + 1))
end

-- Appends two values to a list of arguments.
local function push_all_pairs(list, a, b)
  list[#list + 1] = a
  list[#list + 1] = b
end

-- Far-future jobs (issue 34; BENCHMARKS.md, "Layouts for far-future jobs"). A new job whose
-- due time falls in a bucket (far_bucket: FAR_WIDTH wide, or wider for later dues) starting
-- more than FAR_AHEAD after now, and that has nothing to keep but its payload and its attempts
-- (no trace context, priority, group or unique_for of its own), is not written into `jobs` and
-- `delayed` but compact: one element of a list that holds at most FAR_PART jobs of its topic
-- due in that bucket, `far:<bucket>:<n>:<topic>` (part n of the bucket; the bucket is its start
-- in FAR_WIDTHs), found by id through one of FAR_INDEXES small hashes, `fx:<h>`: `topic:id` ->
-- `<bucket>:<n>:<position>`, h from the SHA-1 of `topic:id` (small enough to stay listpacks up
-- to 16 million far jobs a shard: Redis' default hash-max-listpack-entries is 512). The `far`
-- set holds each part, `<bucket>:<n>:<topic>`, scored by the earliest due time among its
-- elements; `farn` the part being filled of each topic and bucket, `<topic>:<bucket>` -> n.
-- The mover (promote.lua) moves a part into `jobs` and `delayed`, with its jobs' exact due
-- times, once its earliest one is due within FAR_AHEAD; a push never writes into a bucket that
-- near, so a part no longer grows once it is due to move. A cancel, a replace or a reschedule
-- of a far job blanks its element ('': skipped by the move) and drops its index entry: bounded
-- (an LSET into a part of at most FAR_PART), and the part keeps its positions. A far job counts
-- as delayed (`<topic>:delayed`) from its push. On a cluster every call declares the keys it
-- touches (`need`): the index hashes the caller knows from the ids (RedisStore::far_indexes),
-- `far` and `farn` are the shard's, and a part, named from what the call reads, is named by a
-- first call that stops before its first write. The bucket is written in base 36,
-- the numbers of each job (in its element and its index entry) in hexadecimal (formatted in C:
-- base 36 in Lua cost 2 us a number more, for a byte or two less). An element:
--   <max_attempts>:<due - bucket start>:<due - created>:<id length>:<id><payload>
-- (it starts with a digit: a later format would start otherwise).
local FAR_WIDTH = 300000000
local FAR_AHEAD = 300000000
local FAR_PART = 1000
local FAR_INDEXES = 32768
local B36 = '0123456789abcdefghijklmnopqrstuvwxyz'
-- list.lua's cursors from here on (2^46) are positions among the far parts: a part's rank in
-- `far` times 1024, plus the position in it.
local FAR_CURSOR = 70368744177664

local function b36(n)
  if n < 36 then return string.sub(B36, n + 1, n + 1) end
  local out = {}
  while n > 0 do
    local d = n % 36
    out[#out + 1] = string.sub(B36, d + 1, d + 1)
    n = (n - d) / 36
  end
  return string.reverse(table.concat(out))
end

-- The index hash of `member`.
local function far_index(prefix, member)
  return prefix .. 'fx:' .. (tonumber(string.sub(redis.sha1hex(member), 1, 4), 16) % FAR_INDEXES)
end

-- The bucket of a new job due at `due`, when it goes far (nil: it does not): the number of the
-- FAR_WIDTH its bucket starts at. A bucket is FAR_WIDTH wide for a job due within a day, an
-- hour within 30 days, a day further ahead (aligned to its width, so its jobs share a start
-- and its part its lists): sparse dues far off fill parts of hundreds of jobs, not of one or
-- two (each part costs a list and a member of `far`, some 150 bytes, estimated). A part moves whole, so
-- a wider bucket's jobs move into `jobs` and `delayed` up to its width early.
local function far_bucket(due, now)
  local ahead, width = due - now, FAR_WIDTH
  if ahead >= 30 * 86400000000 then
    width = 86400000000
  elseif ahead >= 86400000000 then
    width = 3600000000
  end
  local start = math.floor(due / width) * width
  if start > now + FAR_AHEAD then return start / FAR_WIDTH end
  return nil
end

local function far_element(max, due, created, bucket, id, payload)
  return max .. ':' .. string.format('%x:%x:', due - bucket * FAR_WIDTH, due - created) .. #id
    .. ':' .. id .. payload
end

-- The id, the envelope (format 2) and the due time of an element of a part of `bucket` (nil for
-- a blank one, and for one that cannot be read: far_due dead-letters those).
local function far_job(element, bucket)
  local max, off, ago, len, pos = string.match(element, '^(%d+):(%x+):(%x+):(%d+):()')
  if not max or #max > 10 or #off > 12 or #ago > 14 then return nil end
  local stop = pos + tonumber(len)
  if stop == pos or stop - 1 > #element then return nil end
  -- (within the widest bucket, and created after 1970: an envelope every reader reads)
  off, ago = tonumber(off, 16), tonumber(ago, 16)
  local due = bucket * FAR_WIDTH + off
  if off >= 86400000000 or ago > due then return nil end
  return string.sub(element, pos, stop - 1),
    '2:0:' .. max .. ':' .. fmt(due - ago) .. ':' .. fmt(due) .. ':0:' .. string.sub(element, stop),
    due
end

-- Where the far job `member` is (reads its index hash, and the element it points at, which
-- touches its part): {index, member, part, pos, bucket, raw, due}, or nil when it is not a far
-- job; and its index hash. `topic`: member's topic. An entry is believed only when its element
-- is this job's: one left behind by an element that could not be read (far_due) points at
-- nothing, or, once `dq expand` has moved its part and pushes have filled a part of that name
-- again, at another job.
-- On a cluster its index hash and its part must be declared (`need_soon`: the caller declares
-- the index hash, RedisStore::far_indexes; the part is named from the entry): in a deferred
-- region, a key not declared answers nil and is named at `needs_met`.
local function far_where(prefix, member, topic)
  local index = far_index(prefix, member)
  if CLUSTER and not need_soon({index}) then return nil, index end
  local at = redis.call('HGET', index, member)
  local b, n, p = string.match(at or '', '^(%w+):(%d+):(%x+)$')
  if not b or #p > 3 or tonumber(p, 16) >= FAR_PART then return nil, index end
  local w = { index = index, member = member, pos = tonumber(p, 16), bucket = tonumber(b, 36),
    part = prefix .. 'far:' .. b .. ':' .. n .. ':' .. topic }
  if CLUSTER and not need_soon({w.part}) then return nil, index end
  local id, raw, due = far_job(redis.call('LINDEX', w.part, w.pos) or '', w.bucket)
  if id ~= string.sub(member, #topic + 2) then return nil, index end
  w.raw, w.due = raw, due
  return w, index
end

-- The envelope and due time of the far job at `w`.
local function far_read(w)
  return w.raw, w.due
end

-- Takes the far job at `w` out (a cancel, a replace, a reschedule): its element goes blank, and
-- (`far_unindex`, after every other use of the index hash: the HDEL may delete it) its index
-- entry goes.
local function far_blank(w)
  redis.call('LSET', w.part, w.pos, '')
end

local function far_unindex(w)
  redis.call('HDEL', w.index, w.member)
end

-- When the mover must next move far jobs: FAR_AHEAD before the earliest due time of the part
-- ranked `rank` in `far` (nil: none).
local function far_next(prefix, rank)
  local part = redis.call('ZRANGE', prefix .. 'far', rank, rank, 'WITHSCORES')
  if part[2] then return tonumber(part[2]) - FAR_AHEAD end
  return nil
end

-- Plans the writing of new far jobs (push.lua): `jobs` is a list of {topic, member, bucket,
-- element, due, index}. Reads only, touching every key `far_write` writes but the index hashes
-- (the caller touched them).
local function far_plan(prefix, jobs)
  local plan, names = { prefix = prefix, groups = {}, order = {} }, {}
  for _, j in ipairs(jobs) do
    local b = names[j.bucket]
    if not b then
      b = b36(j.bucket)
      names[j.bucket] = b
    end
    local field = j.topic .. ':' .. b
    local g = plan.groups[field]
    if not g then
      g = { topic = j.topic, b = b, jobs = {} }
      plan.groups[field] = g
      plan.order[#plan.order + 1] = field
    end
    g.jobs[#g.jobs + 1] = j
  end
  -- On a cluster: the index hashes (declared by the caller, RedisStore::far_indexes) and the
  -- parts (named from `farn`, which the caller may not know) must be declared; called between
  -- `defer_needs()` and `needs_met()` (push.lua), so that those it lacks are named in one stop.
  local indexes = {}
  for x, j in ipairs(jobs) do indexes[x] = j.index end
  local indexed = true -- (whether every index hash is declared: touched below only then)
  if CLUSTER then
    need({prefix .. 'far', prefix .. 'farn'})
    indexed = need_soon(indexes)
  end
  redis.call('EXISTS', prefix .. 'far', prefix .. 'farn')
  local parts = hmget_all(prefix .. 'farn', plan.order)
  for x, field in ipairs(plan.order) do
    local g = plan.groups[field]
    g.n = tonumber(parts[x] or 0)
    -- The length of each part the call writes (those it opens are empty unless Redis' clock
    -- went back, and are read all the same).
    g.lens = {}
    local base, n, left = prefix .. 'far:' .. g.b .. ':', g.n, #g.jobs
    while true do
      local part = base .. n .. ':' .. g.topic
      -- (a part not declared is taken as empty: the call stops at needs_met, naming it)
      g.lens[n] = (not CLUSTER or need_soon({part})) and redis.call('LLEN', part) or 0
      left = left - math.max(FAR_PART - g.lens[n], 0)
      if left <= 0 then break end
      n = n + 1
    end
  end
  if indexed then push_all('EXISTS', prefix .. 'far', indexes) end
  -- The earliest due time written, and when the movers must come as things stand (far_write
  -- announces the sooner of the two).
  for _, j in ipairs(jobs) do plan.first = math.min(plan.first or j.due, j.due) end
  plan.was = far_next(prefix, 0)
  return plan
end

-- Writes a plan of `far_plan`, and wakes the movers when its earliest part is due to move
-- before the next move they know of (`before`: the delayed set's earliest before the call).
local function far_write(plan, before)
  local prefix = plan.prefix
  local far, index_writes, indexes, filling = prefix .. 'far', {}, {}, {}
  for _, field in ipairs(plan.order) do
    local g = plan.groups[field]
    local n, i = g.n, 1
    local len = g.lens[n]
    while i <= #g.jobs do
      while len >= FAR_PART do
        n = n + 1
        len = g.lens[n]
      end
      local name = g.b .. ':' .. n .. ':' .. g.topic
      local stop = math.min(#g.jobs, i + FAR_PART - len - 1)
      local elements, first = {}, nil
      for k = i, stop do
        local j = g.jobs[k]
        elements[#elements + 1] = j.element
        local w = index_writes[j.index]
        if not w then
          w = {}
          index_writes[j.index] = w
          indexes[#indexes + 1] = j.index
        end
        push_all_pairs(w, j.member, g.b .. ':' .. n .. ':' .. string.format('%x', len + k - i))
        if not first or j.due < first then first = j.due end
      end
      redis.call('RPUSH', prefix .. 'far:' .. name, unpack(elements))
      redis.call('ZADD', far, 'LT', fmt(first), name)
      len = len + stop - i + 1
      i = stop + 1
    end
    push_all_pairs(filling, field, fmt(n))
  end
  push_all('HSET', prefix .. 'farn', filling)
  for _, index in ipairs(indexes) do redis.call('HSET', index, unpack(index_writes[index])) end
  local was = plan.was
  if before and (not was or before < was) then was = before end
  announce_first(prefix, plan.first - FAR_AHEAD, was)
end

-- A dead letter of `topic` that far_due plans and far_move writes: `e`, an envelope as `parse`
-- reads one, under `id`.
local function far_dead(plan, topic, id, e)
  local list = plan.dead[topic]
  if not list then
    list = {}
    plan.dead[topic] = list
  end
  list[#list + 1] = {topic .. ':' .. id, e}
end

-- Plans the move of the far parts whose earliest job is due within FAR_AHEAD, at most `most`
-- of them (promote.lua): their jobs into `jobs` and `delayed`. Reads only, touching every key
-- `far_move` writes but `jobs` and `delayed`. Returns nil when none is due; `plan.first` is the
-- earliest due time it moves, `plan.next` when the next move is due (nil: no part left).
-- `every`: the parts due soonest whenever they are due (expand.lua).
-- On a cluster every key it reads is declared: the parts named from `far`, the index hashes of
-- their jobs and the dead sets of their topics, all named in one stop (`need_soon`); so a move
-- takes three calls there (the parts, then what is in them, then the move). A call that was
-- given parts moves those of them still due and names no others: when another mover moved
-- them all between its calls, it moves none (nil), and the caller comes back for the next
-- ones in a fresh call, instead of naming them in a fourth (movers of every process race for
-- the same parts, and a loser would stop again at each part it lost).
local function far_due(prefix, now, most, every)
  local far = prefix .. 'far'
  if CLUSTER then need({far, prefix .. 'farn', prefix .. 'counts', prefix .. 'jobs'}) end
  local parts = redis.call('ZRANGEBYSCORE', far, '-inf', every and '+inf' or fmt(now + FAR_AHEAD),
    'LIMIT', 0, most)
  if CLUSTER and #parts > 0 then
    local given, named = {}, false
    for _, name in ipairs(parts) do
      if all_declared({prefix .. 'far:' .. name}) then given[#given + 1] = name end
    end
    for _, key in ipairs(KEYS) do
      if string.sub(key, 1, #far + 1) == far .. ':' then
        named = true
        break
      end
    end
    if named then parts = given end
  end
  if #parts == 0 then return nil end
  defer_needs()
  local plan = { prefix = prefix, now = now, parts = parts, keys = {}, writes = {}, adds = {},
    dropped = {}, indexes = {}, fields = {}, filling = {}, moved = 0, members = {}, jobs = {},
    dead = {}, left = {} }
  for _, name in ipairs(parts) do
    -- (a member that names no part, which dq never writes, is only dropped, as promote.lua
    -- drops a member of `delayed` that names no job)
    local b, n, topic = string.match(name, '^(%w+):(%d+):(.+)$')
    local key = b and prefix .. 'far:' .. name
    local bucket = b and tonumber(b, 36)
    if bucket then
      plan.keys[#plan.keys + 1] = key
      plan.fields[#plan.fields + 1] = topic .. ':' .. b
      plan.filling[#plan.filling + 1] = n
    end
    local readable = bucket and (not CLUSTER or need_soon({key}))
    for pos, element in ipairs(readable and redis.call('LRANGE', key, 0, -1) or {}) do
      local id, raw, due = far_job(element, bucket)
      local where = b .. '-' .. n .. '-' .. (pos - 1) .. '-' .. string.format('%x', now)
      if not id and element ~= '' then
        -- An element that cannot be read (dq never writes one) is not dropped: it becomes a
        -- dead letter of its topic, under an id naming where it was, the element its payload,
        -- for a person to look at. Its id, if it had one, is not known: an index entry of it
        -- may stay, which far_where disbelieves. Counts: it leaves the delayed count (every
        -- element dq writes was counted there at its push; at most what the count held when
        -- the call read it) for the dead set.
        far_dead(plan, topic, 'far-unreadable-' .. where, {attempt = 0, max = 0,
          created = now, due = now, payload = element, err = 'an element of part far:' .. name
            .. ' (jobs due far ahead, stored compact) at position ' .. (pos - 1)
            .. ' could not be read; dq never writes one, so it was changed in Redis. Its text is'
            .. ' this job\'s payload: look at it, push its job again if it was one, then purge'
            .. ' this dead letter'})
        plan.left[topic] = (plan.left[topic] or 0) + 1
      elseif id then
        local member = topic .. ':' .. id
        plan.members[#plan.members + 1] = member
        plan.jobs[#plan.jobs + 1] = {topic = topic, member = member, raw = raw, due = due,
          where = where, part = name}
        local index = far_index(prefix, member)
        local list = plan.dropped[index]
        if not list then
          list = {}
          plan.dropped[index] = list
          plan.indexes[#plan.indexes + 1] = index
        end
        list[#list + 1] = member
      end
    end
  end
  -- An id already in `jobs` was pushed again by a process that did not see its far job (an
  -- older release, during an upgrade or a rollback: OPERATIONS.md) and made a second job,
  -- which may be running or done by now: that one keeps the id, and the far job becomes a dead
  -- letter under an id of its own, with its payload, due time and the reason, for a person to
  -- run or purge. Never overwritten, never dropped.
  if CLUSTER then
    need_soon(plan.indexes)
    -- (the dead sets of the parts' topics: where far_move puts what it cannot move)
    local dead, seen = {}, {}
    for _, name in ipairs(parts) do
      local topic = string.match(name, '^%w+:%d+:(.+)$')
      if topic and not seen[topic] then
        seen[topic] = true
        dead[#dead + 1] = prefix .. 'dead:' .. topic
      end
    end
    need_soon(dead)
  end
  needs_met()
  local taken = hmget_all(prefix .. 'jobs', plan.members)
  for x, j in ipairs(plan.jobs) do
    if taken[x] then
      -- (far_job builds only envelopes `parse` reads; the fallback keeps it so if one is not)
      local e = parse(j.raw) or {attempt = 0, max = 0, created = now, due = now, payload = j.raw}
      e.err = 'job ' .. string.sub(j.member, #j.topic + 2) .. ' was due far ahead (stored'
        .. ' compact, part far:' .. j.part .. ') when a process that did not see it pushed the'
        .. ' same id again (an older release of dq, during an upgrade or a rollback) and made a'
        .. ' second job, which keeps the id. This one is its first push, dead-lettered here with'
        .. ' its payload and due time: retry it if it should run too, or purge it'
      far_dead(plan, j.topic, 'far-clash-' .. j.where, e)
      plan.left[j.topic] = (plan.left[j.topic] or 0) + 1
    else
      push_all_pairs(plan.writes, j.member, j.raw)
      push_all_pairs(plan.adds, fmt(j.due), j.member)
      plan.moved = plan.moved + 1
      if not plan.first or j.due < plan.first then plan.first = j.due end
    end
  end
  for topic, k in pairs(plan.left) do
    local have = tonumber(redis.call('HGET', prefix .. 'counts', topic .. ':delayed') or 0) or 0
    plan.left[topic] = math.max(math.min(k, have), 0)
  end
  plan.current = hmget_all(prefix .. 'farn', plan.fields)
  push_all('EXISTS', prefix .. 'farn', plan.indexes)
  if next(plan.dead) then
    redis.call('EXISTS', prefix .. 'counts')
    for topic in pairs(plan.dead) do redis.call('EXISTS', prefix .. 'dead:' .. topic) end
  end
  plan.next = far_next(prefix, #parts)
  return plan
end

-- Writes a plan of `far_due` (nil: nothing); the writes that may delete a key come last.
local function far_move(plan, jobs, delayed)
  if not plan then return end
  local prefix = plan.prefix
  push_all('HSET', jobs, plan.writes)
  push_all('ZADD', delayed, plan.adds)
  local now = plan.now -- the dead letters' time: the call's, as far_due read it
  for topic, letters in pairs(plan.dead) do
    local members = {}
    for _, d in ipairs(letters) do
      redis.call('HSET', jobs, d[1], encode(d[2]))
      push_all_pairs(members, fmt(now), d[1])
    end
    push_all('ZADD', prefix .. 'dead:' .. topic, members)
  end
  for topic, k in pairs(plan.left) do bump(prefix .. 'counts', topic, 'delayed', -k) end
  for _, index in ipairs(plan.indexes) do push_all('HDEL', index, plan.dropped[index]) end
  local done = {}
  for x, field in ipairs(plan.fields) do
    if plan.current[x] == plan.filling[x] then done[#done + 1] = field end
  end
  push_all('HDEL', prefix .. 'farn', done)
  push_all('ZREM', prefix .. 'far', plan.parts)
  if #plan.keys > 0 then redis.call('DEL', unpack(plan.keys)) end
end

-- Groups (issue 33, item 3): a job pushed with a group key holds a slot of its group from the
-- moment it is let into its topic's ready lanes until it ends (succeeds, is dead-lettered, is
-- cancelled, or is replaced into another group: push.lua), through its runs, retries and
-- postponements, and while its group's rate holds it back (fetch.lua: it waits delayed); a
-- released or reclaimed job keeps it. A group holds at most its topic's group concurrency (`limits`:
-- `<topic>:group_concurrency`, 1 when absent) of slots; a job that finds its group's slots all
-- held waits, parked, and the first parked job of a group is let in, last in line, when one of
-- its slots comes back. A group therefore has at most that many jobs in line or running, so one
-- with a million jobs waiting takes its turn as one with one does (round robin through the
-- ready list), and fetch is untouched: O(1) per job whatever the number of groups. Keys, per
-- topic: `gactive:<topic>` HASH id -> group (the jobs holding a slot); `groups:<topic>` HASH
-- group -> slots held (absent: none); `parked:<topic>` ZSET id scored by its number in push
-- order (`<topic>:seq` in the counts hash); `gq:<topic>:<group>` LIST `<id>`, the group's
-- parked jobs in order, exactly those: the next are let in with one LPOP (`pop_nexts`), and a
-- job taken out of line (a cancel, a replace, a reschedule to later) is removed with an LREM
-- from the tail, O(jobs of its group parked behind it), or from the head for one a replace
-- parks again in the same group, O(jobs before it); `gwait:<topic>` ZSET group scored by
-- how many of its jobs are parked (the busiest groups, and how many a line gives). Every job
-- of a group lives in its group's shard (produce.rs refuses a grouped push whose id leads
-- elsewhere), so a shard counts its groups' slots alone.

-- The keys of `topic`'s groups that every call reaching them declares on a cluster (`need`;
-- RedisStore::group_keys names the same).
local function topic_group_keys(prefix, topic)
  return { prefix .. 'gactive:' .. topic, prefix .. 'groups:' .. topic,
    prefix .. 'parked:' .. topic, prefix .. 'gwait:' .. topic }
end

-- `written`: called after the script's first write, where its keys were needed before (no
-- stop there).
local function group_keys(prefix, topic, written)
  local names = topic_group_keys(prefix, topic)
  if not written then need(names) end
  return { prefix = prefix, topic = topic, active = names[1], held = names[2],
    parked = names[3], waiting = names[4] }
end

local function group_queue(k, group)
  return k.prefix .. 'gq:' .. k.topic .. ':' .. group
end

-- The group of a stored envelope (nil without one, or for one that cannot be read).
-- Read from the header alone (a promotion reads every due job's): the payload is not copied.
local function group_of(raw)
  if not raw then return nil end
  local el, tl, gl, pos = string.match(raw, '^4:%d+:%d+:%d+:%d+:(%d+):(%d+):%-?%d+:(%d+):()')
  if not gl or gl == '0' then return nil end
  local from = pos + tonumber(el) + tonumber(tl)
  local g = string.sub(raw, from, from + tonumber(gl) - 1)
  if #g ~= tonumber(gl) then return nil end
  return g
end

-- The priority (0 without one) and the group (nil without one) of a stored envelope, read from
-- its header with one match: a promotion reads every due job's of a ranked or grouped topic
-- (two matches, priority_of's and group_of's, cost 0.8 us more a job: BENCHMARKS.md).
local function rank_and_group(raw)
  if not raw then return 0, nil end
  local el, tl, p, gl, pos = string.match(raw, '^4:%d+:%d+:%d+:%d+:(%d+):(%d+):(%-?%d+):(%d+):()')
  if not p then return 0, nil end
  if gl == '0' then return tonumber(p), nil end
  local from = pos + tonumber(el) + tonumber(tl)
  local g = string.sub(raw, from, from + tonumber(gl) - 1)
  if #g ~= tonumber(gl) then return tonumber(p), nil end
  return tonumber(p), g
end

local function group_limit(prefix, topic)
  local n = tonumber(redis.call('HGET', prefix .. 'limits', topic .. ':group_concurrency') or '')
  if n and n >= 1 then return n end
  return 1
end

-- The slots each of `names` holds (read).
local function slots_held(k, names)
  local held = {}
  if #names == 0 then return held end
  local raw = hmget_all(k.held, names)
  for i, g in ipairs(names) do held[g] = tonumber(raw[i] or 0) end
  return held
end

-- Adds `sign * by[i]` to the parked count of each group `names[i]` (distinct) in `k.waiting`:
-- one ZMSCORE and one ZADD for all, reading the counts as they are at this point of the script
-- (a ZINCRBY per group cost a call per group, each several microseconds: BENCHMARKS.md).
local function add_waiting(k, names, by, sign)
  if #names == 0 then return end
  local old = read_many('ZMSCORE', k.waiting, names)
  local args = {}
  for i, g in ipairs(names) do push_all_pairs(args, fmt(tonumber(old[i] or 0) + sign * by[i]), g) end
  push_all('ZADD', k.waiting, args)
end

-- Plans letting grouped jobs into `topic`'s ready lanes (a push, a promotion, a requeue):
-- `jobs` is a list of {id, group, priority}. Reads only, touching every key `write_enter`
-- writes; the jobs that already hold a slot (a retry's, a postponement's) go in as they are.
-- `held_from` (optional): the slots some groups hold once a plan of `plan_leave` of the same
-- call is written (it is written first: `write_leave(leave, counts, plan)`).
local function plan_enter(prefix, topic, jobs, held_from)
  local k = group_keys(prefix, topic)
  local plan = { k = k, admit = {}, levels = {}, park = {}, held = {} }
  if #jobs == 0 then return plan end
  local ids = {}
  for i, j in ipairs(jobs) do ids[i] = j[1] end
  local holding = hmget_all(k.active, ids)
  local names, seen = {}, {}
  for _, j in ipairs(jobs) do
    if not seen[j[2]] then
      seen[j[2]] = true
      names[#names + 1] = j[2]
    end
  end
  local held = slots_held(k, names)
  for g, n in pairs(held_from or {}) do
    if held[g] then held[g] = n end
  end
  local limit = group_limit(prefix, topic)
  local queues = {}
  for i, j in ipairs(jobs) do
    if holding[i] then
      plan.admit[#plan.admit + 1] = j[1]
      plan.levels[#plan.admit] = j[3]
    elseif held[j[2]] < limit then
      held[j[2]] = held[j[2]] + 1
      plan.held[j[2]] = held[j[2]]
      plan.admit[#plan.admit + 1] = j[1]
      plan.levels[#plan.admit] = j[3]
      plan.active = plan.active or {}
      push_all_pairs(plan.active, j[1], j[2])
    else
      plan.park[#plan.park + 1] = j
      if not queues[j[2]] then
        queues[j[2]] = true
        queues[#queues + 1] = group_queue(k, j[2])
      end
    end
  end
  -- Every list a job parks in, declared, and touched before the first write: one EXISTS for all.
  if CLUSTER and not need_soon(queues) then return plan end
  push_all('EXISTS', k.waiting, queues)
  redis.call('EXISTS', k.parked, k.waiting)
  if #plan.admit > 0 then touch_lanes(prefix, topic) end
  return plan
end

-- Pushes the entries `plan` (of `plan_enter`) parks onto their groups' lines, one RPUSH a
-- group, in order, and counts them in; only the groups of `only` when given (write_leave
-- pushes those first), each group once. Returns how many went onto each group's line, and
-- the set of their ids.
local function park_lines(plan, only)
  local k = plan.k
  plan.lined = plan.lined or {}
  local lines, order = {}, {}
  for _, j in ipairs(plan.park) do
    local g = j[2]
    if not plan.lined[g] and (not only or only[g]) then
      local line = lines[g]
      if not line then
        line = {}
        lines[g] = line
        order[#order + 1] = g
      end
      line[#line + 1] = j[1]
    end
  end
  local by, pushed, ids = {}, {}, {}
  for x, g in ipairs(order) do
    push_all('RPUSH', group_queue(k, g), lines[g])
    plan.lined[g] = true
    by[x] = #lines[g]
    pushed[g] = by[x]
    for _, id in ipairs(lines[g]) do ids[id] = true end
  end
  add_waiting(k, order, by, 1)
  return pushed, ids
end

-- Writes a plan of `plan_enter`; rings the topic when jobs went in line. Then the removals a
-- plan of `plan_leave` written before it left to it (`plan.after`).
local function write_enter(plan, counts)
  local k = plan.k
  if plan.active then push_all('HSET', k.active, plan.active) end
  local held = {}
  for g, n in pairs(plan.held) do push_all_pairs(held, g, fmt(n)) end
  push_all('HSET', k.held, held)
  if #plan.admit > 0 then
    to_ready(k.prefix, counts, k.topic, plan.admit, plan.levels)
    ring(k.prefix, k.topic)
  end
  if #plan.park > 0 then
    local last = redis.call('HINCRBY', counts, k.topic .. ':seq', #plan.park)
    local scored = {}
    for i, j in ipairs(plan.park) do push_all_pairs(scored, fmt(last - #plan.park + i), j[1]) end
    park_lines(plan)
    push_all('ZADD', k.parked, scored)
  end
  if plan.after then plan.after() end
end

-- Plans the parked jobs each group of `wants` lets in ({group, left}: it holds `left` slots
-- before them of `limit`; groups distinct): how many its line gives (`plan.pops`), counted from
-- the groups' parked counts (one ZMSCORE for all: a group's line holds exactly its parked jobs,
-- first first), the jobs themselves popped by `write_leave` (one LPOP a group that lets jobs
-- in, where reading a line's head and trimming it cost two calls a group: BENCHMARKS.md).
-- Reads only, touching the lines it pops and the lanes. `skip` (optional): parked ids the
-- calling script takes out of line itself (push.lua's replaces), each with its group (false
-- when its envelope could not be read): never let in, nor counted.
local function plan_nexts(plan, wants, limit, skip)
  local k = plan.k
  if #wants == 0 then return end
  local names = {}
  for x, w in ipairs(wants) do names[x] = w[1] end
  local waiting = read_many('ZMSCORE', k.waiting, names)
  local skipped = {}
  for _, g in pairs(skip or {}) do
    if g then skipped[g] = (skipped[g] or 0) + 1 end
  end
  local queues = {}
  for x, w in ipairs(wants) do
    local parked = tonumber(waiting[x] or 0)
    local left = parked - (skipped[w[1]] or 0)
    local n = math.min(limit - w[2], left)
    plan.held[w[1]] = w[2] + math.max(n, 0)
    if n > 0 then
      plan.pops[#plan.pops + 1] = {w[1], n, parked, left}
      queues[#queues + 1] = group_queue(k, w[1])
    end
  end
  if CLUSTER and not need_soon(queues) then
    plan.pops = {}
    return
  end
  if #queues > 0 then
    push_all('EXISTS', k.waiting, queues) -- touched before the first write
    touch_lanes(k.prefix, k.topic)
    plan.ranked = redis.call('HGET', k.prefix .. 'counts', k.topic .. ':ranked') ~= false
  end
end

-- Lets in the jobs `plan.pops` plans (write_leave): pops them from their lines, and counts
-- the groups' slots and parked jobs. A popped id the caller takes out itself (`skip`) is not let
-- in (`plan.popped`: its entry is gone), nor one that is no longer parked (an entry a cancel
-- could not take out: a job whose envelope it could not read), which counts out of its group.
-- A line emptied here (`plan.emptied`) is not used again: the LPOP may have deleted it.
local function pop_nexts(plan, skip)
  local k = plan.k
  plan.emptied, plan.popped = {}, {}
  local round = {}
  for x, p in ipairs(plan.pops) do
    round[x] = {g = p[1], want = p[2], parked = p[3], left = p[4], got = 0, taken = 0,
      key = group_queue(k, p[1])}
  end
  local all = round
  while #round > 0 do
    -- One LPOP a group, then one ZMSCORE for all the ids popped.
    local ids, owners = {}, {}
    for _, st in ipairs(round) do
      -- (never past the entries the plan counted: `enter`'s may follow them)
      local ask = math.min(st.want - st.got, st.parked - st.taken)
      local got = redis.call('LPOP', st.key, ask) or {}
      st.taken = #got < ask and st.parked or st.taken + #got
      local back
      for _, id in ipairs(got) do
        if not back and skip and skip[id] ~= nil and not plan.popped[id] then
          -- (its first entry: a second is the one `enter` parked again)
          plan.popped[id] = true
          -- (one whose group could not be read was not counted out by `unpark`)
          if not skip[id] then st.left = st.left - 1 end
        elseif back or (plan.fresh and plan.fresh[id]) then
          -- Past the entries counted (counts gone wrong): `enter`'s own, put back in front.
          back = back or {}
          back[#back + 1] = id
        else
          ids[#ids + 1] = id
          owners[#ids] = st
        end
      end
      if back then
        local front = {}
        for x = #back, 1, -1 do front[#front + 1] = back[x] end
        redis.call('LPUSH', st.key, unpack(front))
        st.taken = st.parked
      end
    end
    local live = read_many('ZMSCORE', k.parked, ids)
    for x, id in ipairs(ids) do
      local st = owners[x]
      if live[x] then
        st.got = st.got + 1
        plan.admit[#plan.admit + 1] = id
        push_all_pairs(plan.active, id, st.g)
      else
        st.left = st.left - 1
      end
    end
    local short = {}
    for _, st in ipairs(round) do
      if st.got < st.want and st.taken < st.parked then short[#short + 1] = st end
    end
    round = short
  end
  local counted = {}
  for _, st in ipairs(all) do
    if st.taken >= st.parked then plan.emptied[st.g] = true end
    plan.held[st.g] = plan.held[st.g] - st.want + st.got
    -- Its parked count: the replaced ones skipped are counted out by `unpark`; the ones
    -- `enter` parked first (write_leave) are in.
    push_all_pairs(counted, fmt(math.max(st.left - st.got, 0) + (plan.pushed and plan.pushed[st.g] or 0)), st.g)
  end
  push_all('ZADD', k.waiting, counted)
  if #plan.admit > 0 and plan.ranked then
    local members = {}
    for x, id in ipairs(plan.admit) do members[x] = k.topic .. ':' .. id end
    for x, raw in ipairs(hmget_all(k.prefix .. 'jobs', members)) do plan.levels[x] = priority_of(raw) end
  end
end

-- An empty plan of `plan_leave` for the slots `leaving` give back (ids) in `k`'s topic.
local function leave_plan(k, leaving)
  return { k = k, leaving = leaving, held = {}, was = {}, admit = {}, levels = {}, pops = {},
    active = {} }
end

-- Plans the return of the slots of `ids` of `topic` (jobs that ended, or left their group: a
-- cancel, a replace, a reschedule to later) and the jobs their groups let in next. Reads only
-- (nil when none of them holds a slot), touching every key `write_leave` writes. `skip`
-- (optional): parked ids the caller takes out of line itself, never let in (plan_nexts).
local function plan_leave(prefix, topic, ids, skip)
  local k = group_keys(prefix, topic)
  if #ids == 0 or redis.call('EXISTS', k.active) == 0 then return nil end
  local groups_of = hmget_all(k.active, ids)
  local leaving, freed, names = {}, {}, {}
  for x, id in ipairs(ids) do
    local g = groups_of[x]
    if g then
      leaving[#leaving + 1] = id
      if not freed[g] then names[#names + 1] = g end
      freed[g] = (freed[g] or 0) + 1
    end
  end
  if #leaving == 0 then return nil end
  local held = slots_held(k, names)
  local limit = group_limit(prefix, topic)
  local plan = leave_plan(k, leaving)
  plan.skip = skip
  redis.call('EXISTS', k.parked, k.waiting)
  local wants = {}
  for x, g in ipairs(names) do
    wants[x] = {g, math.max(held[g] - freed[g], 0)}
    plan.was[g] = held[g]
  end
  plan_nexts(plan, wants, limit, skip)
  return plan
end

-- Writes a plan of `plan_leave` (nil: nothing); rings the topic when jobs went in line. The
-- writes that may delete a key come after every other use of it (a line its pop emptied is
-- in `plan.emptied`). `enter` (optional): a plan of `plan_enter` made with this plan's counts
-- (`held_from`), written next, which sets the counts of its groups: those are left to it.
local function write_leave(plan, counts, enter)
  if not plan then return end
  local k = plan.k
  if enter then
    -- The jobs `enter` parks in a line popped here go in first, behind its old entries, so
    -- that no pop deletes a list written after it.
    local popped = {}
    for _, p in ipairs(plan.pops) do popped[p[1]] = true end
    plan.pushed, plan.fresh = park_lines(enter, popped)
  end
  pop_nexts(plan, plan.skip)
  push_all('HSET', k.active, plan.active)
  local set, gone = {}, {}
  for g, n in pairs(plan.held) do
    if enter and enter.held[g] then
      -- written by `enter`
    elseif n > 0 then
      -- (a group whose count is back where it was is not written again)
      if n ~= plan.was[g] then push_all_pairs(set, g, fmt(n)) end
    else
      gone[#gone + 1] = g
    end
  end
  push_all('HSET', k.held, set)
  if #plan.admit > 0 then
    to_ready(k.prefix, counts, k.topic, plan.admit, plan.levels)
    ring(k.prefix, k.topic)
  end
  -- The removals, after `enter`'s writes when it follows (they may delete its keys).
  local function removals()
    if #plan.pops > 0 then redis.call('ZREMRANGEBYSCORE', k.waiting, '-inf', 0) end
    push_all('ZREM', k.parked, plan.admit)
    push_all('HDEL', k.held, gone)
    push_all('HDEL', k.active, plan.leaving)
  end
  if enter then enter.after = removals else removals() end
end

-- Takes parked jobs out (a cancel, a replace, a reschedule to later), in two steps around a
-- script's other writes, its keys touched before its first write (`k.parked`, `k.waiting` and
-- the lines of `gone`'s groups: `touch_parked`): `unpark` counts each of `gone` ({id, group}
-- pairs) out of its group, `tidy_parked` removes each from its line and from the parked set
-- and the groups left with none parked, after every other use of those keys (each removal may
-- delete its key). A line's LREM scans it from the tail (a job replaced or cancelled soon
-- after its push is near it), from the head for an id `again` holds (the call parked it again
-- at the tail); not where `leave` (a plan of `plan_leave` written in the call) popped it
-- already, nor in a line it emptied.
local function touch_parked(k, gone)
  local queues = {}
  for _, g in ipairs(gone) do
    if g[2] then queues[#queues + 1] = group_queue(k, g[2]) end
  end
  if CLUSTER and not need_soon(queues) then return end
  redis.call('EXISTS', k.parked, k.waiting)
  push_all('EXISTS', k.parked, queues)
end

local function unpark(k, gone)
  for _, g in ipairs(gone) do
    if g[2] then redis.call('ZINCRBY', k.waiting, -1, g[2]) end
  end
end

local function tidy_parked(k, gone, again, leave)
  if #gone == 0 then return end
  local ids = {}
  local emptied, popped = leave and leave.emptied or {}, leave and leave.popped or {}
  for _, g in ipairs(gone) do
    local back = again and again[g[1]]
    if not back then ids[#ids + 1] = g[1] end
    if g[2] and not emptied[g[2]] and not popped[g[1]] then
      redis.call('LREM', group_queue(k, g[2]), back and 1 or -1, g[1])
    end
  end
  -- (a `leave` that popped trimmed the counts after `unpark` already, and may have deleted
  -- the key)
  if not (leave and #leave.pops > 0) then redis.call('ZREMRANGEBYSCORE', k.waiting, '-inf', 0) end
  push_all('ZREM', k.parked, ids)
end

-- Kept records of succeeded jobs (a topic with a retention), per topic and shard: the hash
-- `done:<topic>` holds `topic:id` -> `<us it succeeded>:<value>` (the value '' for none; the
-- job's envelope stays in `jobs`), and the list `done:<topic>:order` the ack calls that kept
-- them, oldest first: per call its n members, an element each, between two heads `<us>:<n>`
-- (the first read when the oldest calls go, the last when a page walks back from the newest).
-- An ack adds its jobs with one `HSET` and one `RPUSH`, and forgets the oldest calls' records once the
-- rest still holds the count or once they are older than the age, handing the members the list
-- holds to `HDEL` as they come (no work per record in Lua: a record cost 2.6 us of Redis CPU when
-- each was read and compared, BENCHMARKS.md).
-- A push or a cancel of a kept id takes its record out (push.lua, cancel.lua), and a later ack
-- may keep the id again: the call that first kept it must then forget neither the new record
-- nor the new job's envelope. So a take counts the id in `done:<topic>:taken` (id -> how many of
-- its listed records were taken out), and while that hash is not empty the ack checks the
-- records of a call it forgets against the call's time, and counts down the ids whose record was
-- not the call's. The hash holds the ids taken out and not yet forgotten: empty in a run that
-- pushes no kept id again. Kept in one hash of steady size: a hash that starts small and grows
-- at each call cost twice as much per job (BENCHMARKS.md).

-- When a record `<us>:<value>` was kept (text), and its value.
local function record_parts(rec)
  return string.match(rec, '^(%d+):(.*)$')
end

-- An order head: when its call kept its records (text), and how many.
local function order_head(entry)
  local at, n = string.match(entry, '^(%d+):(%d+)$')
  return at, tonumber(n)
end

-- The keys of a topic's kept records (`done` is `done:<topic>`).
local function record_keys(done)
  return done .. ':order', done .. ':taken'
end

-- Which of `members`, listed by the call that kept records at `at` (text), still hold that
-- call's records (`current`, as HMGET of `done` read them), and the others.
local function still_kept(at, members, current)
  local prefix = at .. ':'
  local still, not_ours = {}, {}
  for i, member in ipairs(members) do
    local rec = current[i]
    if rec and string.sub(rec, 1, #prefix) == prefix then
      still[#still + 1] = member
    else
      not_ours[#not_ours + 1] = member
    end
  end
  return still, not_ours
end

-- Counts the ids of `members` whose records were taken out (a push or a cancel of a kept id:
-- lib.lua's comment on kept records), in `taken`, after the take's other writes.
local function take_records(taken, members)
  for _, member in ipairs(members) do redis.call('HINCRBY', taken, member, 1) end
end

-- Counts down in `untaken` (id -> count left, from `taken` at first) the ids of `not_ours`: a
-- call's records that were taken out, the call being forgotten.
local function count_down(taken, not_ours, untaken)
  if #not_ours == 0 then return end
  local counts = redis.call('HMGET', taken, unpack(not_ours))
  for i, member in ipairs(not_ours) do
    local left = untaken[member] or tonumber(counts[i] or 0)
    if left > 0 then untaken[member] = left - 1 end
  end
end

-- Writes the counts of `count_down`. The HDEL may delete `taken`: it is last.
local function write_untaken(taken, untaken)
  local none_left = {}
  for member, left in pairs(untaken) do
    if left > 0 then
      redis.call('HSET', taken, member, left)
    else
      none_left[#none_left + 1] = member
    end
  end
  if #none_left > 0 then redis.call('HDEL', taken, unpack(none_left)) end
end

-- Plans what one ack keeps of `topic` (`members`, with `spec` {age, count}) and forgets: reads
-- only (every key it names is touched here), for `keep_records` to write after. Members
-- beyond the count in one call are not kept (`skipped`): they would go at once. About 2000 old
-- records are looked at per call, at least one call's worth (the next ack goes on): more than
-- a call adds, so the count is caught up with.
local function plan_records(done, topic, spec, now, members)
  local order, taken = record_keys(done)
  local plan = {done = done, order = order, taken = taken, skipped = {}, kept = members,
    trim = 0, gone = {}, untaken = {}}
  if #members > spec.count then
    local first = #members - spec.count + 1
    plan.kept = {}
    for i = 1, #members do
      if i < first then
        plan.skipped[#plan.skipped + 1] = members[i]
      else
        plan.kept[#plan.kept + 1] = members[i]
      end
    end
  end
  local records = redis.call('HLEN', done)
  local total = records + #plan.kept
  local checked = redis.call('EXISTS', taken) == 1
  -- Many more elements listed than records kept: calls whose records a push or a cancel took
  -- out (the count and the age may not come for them); such calls go too.
  local bloated = checked and redis.call('LLEN', order) > 3 * records + 48
  local budget, oldest = 2000, now - spec.age
  while budget > 0 do
    local head = redis.call('LINDEX', order, plan.trim)
    if not head then break end
    local at, n = order_head(head)
    if not at then
      -- Not a head (a list of another layout): it goes, so the calls after it can.
      plan.trim = plan.trim + 1
      break
    end
    -- Judged by its size first (some of its records may have gone since: then the count runs
    -- over by those until later calls make up for them).
    local due = tonumber(at) < oldest or total - n >= spec.count
    if not (due or bloated) or (n > budget and plan.trim > 0) then break end
    local old = n > 0 and redis.call('LRANGE', order, plan.trim + 1, plan.trim + n) or {}
    local still, not_ours = old, {}
    if checked and #old > 0 then
      still, not_ours = still_kept(at, old, redis.call('HMGET', done, unpack(old)))
    end
    if not due and #still > 0 then break end
    -- Counted down only for a call forgotten: a call that stays still lists them.
    count_down(taken, not_ours, plan.untaken)
    plan.gone[#plan.gone + 1] = still
    total = total - #still
    budget = budget - n
    plan.trim = plan.trim + n + 2
  end
  return plan
end

-- Writes a plan of `plan_records`: the records (`records`: member, `<stamp>:<value>` pairs of
-- `plan.kept`), the call's order entry, the records forgotten (their envelopes are the caller's
-- to delete: `plan.gone`, lists of members). The HDELs of `done` cannot delete it (the records
-- just kept are in it), but the one of `taken` may: it is last.
local function keep_records(plan, records, stamp)
  if #plan.kept > 0 then
    redis.call('HSET', plan.done, unpack(records))
    local head = stamp .. ':' .. #plan.kept
    plan.kept[#plan.kept + 1] = head
    redis.call('RPUSH', plan.order, head, unpack(plan.kept))
    plan.kept[#plan.kept] = nil
  end
  if plan.trim > 0 then redis.call('LTRIM', plan.order, plan.trim, -1) end
  for _, gone in ipairs(plan.gone) do
    if #gone > 0 then redis.call('HDEL', plan.done, unpack(gone)) end
  end
  write_untaken(plan.taken, plan.untaken)
end

-- Job events (dq-core's events.rs; keys.rs has the fields). A topic has them on when the shard's
-- `events` hash names it (topic -> cap). A script reads the hash once for the topics of its call
-- (`events_on`: topics without events cost that one HMGET), opens the stream of each topic that
-- has them on before its first write (`events_open`: reading its last entry is the touch this
-- file's rule asks for, and gives the number to go on from), and appends each event with
-- `emit_event` in the same call as the change, after its writes. The streams are never deleted
-- by a script, so using them last is safe. A stream's entries are numbered (`n`) so that a
-- reader resuming after entries were trimmed knows how many it missed.

-- The caps (as stored) of those of `topics` (a list) whose events are on, by topic.
local function events_on(events, topics)
  local on = {}
  if #topics == 0 then return on end
  local caps = redis.call('HMGET', events, unpack(topics))
  for i, topic in ipairs(topics) do
    local cap = tonumber(caps[i])
    if cap and cap >= 1 then on[topic] = caps[i] end
  end
  return on
end

-- A topic's stream `key`, keeping `cap` events, and the number of its last entry. Opened once
-- per script call: a second open of the same stream (a workflow's events beside the script's
-- own) hands the same numbering on.
local opened_streams = {}
local function events_open(key, cap)
  if opened_streams[key] then return opened_streams[key] end
  local n = 0
  local last = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)[1]
  if last and last[2][1] == 'n' then
    n = tonumber(last[2][2]) or 0
  elseif not last then
    -- No stream: one deleted when the topic's events were turned off goes on from its last
    -- number (`<topic>:n` in `events`, events_off.lua), so that a reader resuming from before
    -- misses nothing and is not held back.
    local events, topic = string.match(key, '^(.*events):([^:]+)$')
    if events then n = tonumber(redis.call('HGET', events, topic .. ':n') or '') or 0 end
  end
  opened_streams[key] = { key = key, cap = cap, n = n }
  return opened_streams[key]
end

-- An entry's stream id is `0-<n>`, the number of its last event: ids grow with the events, so
-- trimming below `0-<n - cap + 1>` (XADD's MINID ~) keeps the latest `cap` events however many
-- an entry holds (MAXLEN would count entries, and an entry may hold a thousand). The time of
-- each event is its `t` field.
local function stream_id(stream)
  return '0-' .. fmt(stream.n)
end

local function stream_floor(stream)
  return '0-' .. fmt(math.max(stream.n - tonumber(stream.cap) + 1, 0))
end

-- Appends an entry. An event that cannot be written (a stream key of another type, an entry
-- id below the stream's last one) is lost, never the change it describes: the script goes on.
local function append_entry(args)
  redis.pcall(unpack(args))
end

-- Appends the event `kind` of job `id`'s run `attempt` at `stamp` (us, as text), with one more
-- field when given (`d` due time, `e` error, `v` value).
local function emit_event(stream, kind, id, attempt, stamp, field, value)
  stream.n = stream.n + 1
  local args = {'XADD', stream.key, 'MINID', '~', stream_floor(stream), stream_id(stream),
    'n', fmt(stream.n), 'k', kind, 'id', id, 'a', fmt(attempt), 't', stamp}
  if field then push_all_pairs(args, field, value) end
  append_entry(args)
end

-- Appends the events `kind` of the jobs `ids` (their runs `attempts`, numbers or their text, or
-- none: `a` left out, read as 0; and with `values` each one's `field`, '' for none) as ONE entry
-- when there are several: `c` events numbered up to `n`, each per-job field one line per job
-- (ids hold no whitespace, and may be given as `topic:id`: the reader keeps what follows the
-- colon; a value holding a line break goes in an entry of its own). A stream entry costs about
-- what its XADD costs whatever it holds: a drain with one entry per job and kind lost half its
-- throughput (BENCHMARKS.md). The lists go to the entry as they are (table.concat prints the
-- small numbers of runs exactly): no copy per job unless a value holds a line break.
local function emit_events(stream, kind, ids, attempts, stamp, field, values)
  -- Events written one by one: {id, run, value}.
  local singles = {}
  if values then
    local broken = false
    for i = 1, #values do
      if string.find(values[i], '\n', 1, true) then
        broken = true
        break
      end
    end
    if broken then
      local ids_of, runs, vals = {}, {}, {}
      for i = 1, #ids do
        local run = attempts and attempts[i] or 0
        if string.find(values[i], '\n', 1, true) then
          singles[#singles + 1] = {ids[i], run, values[i]}
        else
          ids_of[#ids_of + 1] = ids[i]
          runs[#runs + 1] = run
          vals[#vals + 1] = values[i]
        end
      end
      ids, values = ids_of, vals
      if attempts then attempts = runs end
    end
  end
  if #ids == 1 then
    singles[#singles + 1] = {ids[1], attempts and attempts[1] or 0, values and values[1]}
  elseif #ids > 1 then
    stream.n = stream.n + #ids
    local args = {'XADD', stream.key, 'MINID', '~', stream_floor(stream), stream_id(stream),
      'n', fmt(stream.n), 'c', fmt(#ids), 'k', kind, 'id', table.concat(ids, '\n'), 't', stamp}
    if attempts then push_all_pairs(args, 'a', table.concat(attempts, '\n')) end
    if values then push_all_pairs(args, field, table.concat(values, '\n')) end
    append_entry(args)
  end
  for _, e in ipairs(singles) do
    if e[3] and e[3] ~= '' then
      emit_event(stream, kind, e[1], e[2], stamp, field, e[3])
    else
      emit_event(stream, kind, e[1], e[2], stamp)
    end
  end
end

-- The runs an envelope counts (0 for none, or one that cannot be read).
local function runs_of(raw)
  return raw and tonumber(string.match(raw, '^[234]:(%d+):')) or 0
end

-- The text of the run an envelope starts (`raw`'s runs so far plus one), as the events print
-- it. Each text is made once per script call: a number printed per job cost a fetch with
-- events about a sixth of a microsecond a job (BENCHMARKS.md, job events).
local run_texts = {}
local function next_run_text(raw)
  local counted = raw and string.match(raw, '^[234]:(%d+):') or '0'
  local text = run_texts[counted]
  if not text then
    text = fmt(tonumber(counted) + 1)
    run_texts[counted] = text
  end
  return text
end

-- The runs counted so far of each of `members` (their envelopes'), 1000 at a time.
local function runs_of_all(jobs, members)
  local out = {}
  for k, raw in ipairs(hmget_all(jobs, members)) do out[k] = runs_of(raw) end
  return out
end

-- Workflows (workflow_push.lua; dq-core's `workflow`). A workflow lives in one shard (workflows
-- need a namespace of one), in the hash `workflow:<id>`:
--   `created` (us), `keep` (us its record is kept once it ended), `left` (steps not ended),
--   `cancelled` ('1' once the workflow was cancelled), `ended` (us, once no step is left),
--   `steps` (the step names in order, comma-separated); and per step s:
--   `m:s` its job's member, `s:s` its state (b blocked, p pending, d succeeded, f failed,
--   c cancelled), `w:s` how many of its dependencies have not ended (while blocked), `a:s` the
--   steps it comes after and `k:s` those that come after it (`name|policy,...`; policy c
--   cancel, r run anyway, w cancel the workflow), `j:s` and `t:s` a blocked step's envelope
--   and delay (us, counted from its release), `v:s` the value it succeeded with, `e:s` the
--   error it failed with.
-- The hash `workflows` maps the member of each job of a step that has not ended (blocked ones
-- too) to `<workflow>:<step>`. Each script that ends a job (ack, dead, reclaim, cancel,
-- cancel_running) calls workflow_plan with what ended, before its first write (reads, and touches
-- every key workflow_write will write), then workflow_write: a step ends with its job, in the same
-- atomic step, and the dependents its end releases are pushed there, exactly once. A shard with
-- no workflow pays one EXISTS per call.

local function workflow_edges(text)
  local out = {}
  if text then
    for name, policy in string.gmatch(text, '([^,|]+)|(%a)') do out[#out + 1] = {name, policy} end
  end
  return out
end

-- A field of a workflow as the plan sees it: its own writes first, then Redis (read once).
local function workflow_get(f, field)
  local v = f.set[field]
  if v ~= nil then return v end
  v = f.read[field]
  if v == nil then
    v = redis.call('HGET', f.key, field)
    f.read[field] = v
  end
  return v
end

-- Reads the `fields` of workflow `f` not read yet, in one HMGET per thousand (a step with a
-- thousand dependents costs a few calls, not a thousand).
local function workflow_prefetch(f, fields)
  local missing = {}
  for _, field in ipairs(fields) do
    if f.set[field] == nil and f.read[field] == nil then missing[#missing + 1] = field end
  end
  if #missing == 0 then return end
  for i, v in ipairs(hmget_all(f.key, missing)) do f.read[missing[i]] = v end
end

-- The workflow `wf` as the plan `plan` changes it (false when its record is gone).
local function workflow_open(plan, wf)
  local f = plan.wfs[wf]
  if f == nil then
    local key = plan.prefix .. 'workflow:' .. wf
    if CLUSTER and not need_soon({key}) then return nil end
    local head = redis.call('HMGET', key, 'left', 'cancelled', 'keep', 'steps')
    f = false
    if head[1] then
      f = {key = key, read = {}, set = {}, releasing = {}, left = tonumber(head[1]),
           was_left = tonumber(head[1]),
           whole = head[2] == '1', keep = tonumber(head[3] or 0) or 0, steps = head[4] or ''}
      plan.order[#plan.order + 1] = f
    end
    plan.wfs[wf] = f
  end
  return f
end

local function workflow_new_plan(prefix)
  return {prefix = prefix, steps_key = prefix .. 'workflows', wfs = {}, order = {}, gone = {},
          releases = {}, stops = {}, stopped = {}, dropped = {}}
end

-- Step `name` of `f` is cancelled without ever having had a job (blocked, or being released).
-- Its member is announced on `ended` (and marked cancelled in a topic that keeps its ends), for
-- the waits for it: `plan.dropped`.
local function workflow_drop(plan, f, name)
  f.set['s:' .. name] = 'c'
  f.last = name
  f.releasing[name] = nil
  f.left = f.left - 1
  local member = workflow_get(f, 'm:' .. name)
  plan.gone[#plan.gone + 1] = member
  if member then plan.dropped[#plan.dropped + 1] = {member = member} end
end

-- Cancels workflow `f` as a whole: its blocked steps (and those this plan would release) are
-- cancelled, its pending steps' jobs stopped (workflow_touch sorts waiting from running). Returns
-- how many steps this touched.
local function workflow_cancel_all(plan, f)
  if f.cancel_done then return 0 end
  f.whole, f.cancel_done = true, true
  f.set['cancelled'] = '1'
  local n = 0
  for name in string.gmatch(f.steps, '[^,]+') do
    local s = workflow_get(f, 's:' .. name)
    if s == 'b' or (s == 'p' and f.releasing[name]) then
      workflow_drop(plan, f, name)
      n = n + 1
    elseif s == 'p' then
      plan.stops[#plan.stops + 1] = {f = f, name = name, member = workflow_get(f, 'm:' .. name)}
      n = n + 1
    end
  end
  return n
end

-- Ends step `name` of `f` with `o` ('d' succeeded with value `text`, 'f' failed with error
-- `text`, 'c' cancelled), and settles its dependents by their policies: a success counts one
-- dependency down (the last releases the step), a failure or cancel cancels the dependent
-- (and on, by the dependent's own dependents' policies), lets it run all the same, or cancels
-- the workflow. A step that ended already is left as it is.
local function workflow_end(plan, f, name, o, text)
  local s = workflow_get(f, 's:' .. name)
  if s ~= 'p' and s ~= 'b' then return end
  if s == 'b' then
    -- A blocked step ended (cancelled: it has no job to end otherwise), announced as a
    -- dropped one is.
    local member = workflow_get(f, 'm:' .. name)
    if member then plan.dropped[#plan.dropped + 1] = {member = member} end
  end
  f.set['s:' .. name] = o
  f.last = name
  f.releasing[name] = nil
  if o == 'd' and text ~= '' then f.set['v:' .. name] = text end
  if o == 'f' then f.set['e:' .. name] = text end
  f.left = f.left - 1
  local queue = {{name, o == 'd'}}
  while #queue > 0 do
    local item = table.remove(queue)
    local edges = workflow_edges(workflow_get(f, 'k:' .. item[1]))
    local wanted = {}
    for _, edge in ipairs(edges) do
      wanted[#wanted + 1] = 's:' .. edge[1]
      wanted[#wanted + 1] = 'w:' .. edge[1]
    end
    workflow_prefetch(f, wanted)
    for _, edge in ipairs(edges) do
      local child, policy = edge[1], edge[2]
      if workflow_get(f, 's:' .. child) == 'b' then
        if item[2] or policy == 'r' then
          local w = (tonumber(workflow_get(f, 'w:' .. child)) or 1) - 1
          f.set['w:' .. child] = fmt(w)
          if w <= 0 and not f.whole then
            f.set['s:' .. child] = 'p'
            f.releasing[child] = true
            plan.releases[#plan.releases + 1] = {f = f, name = child}
          end
        elseif policy == 'c' then
          workflow_drop(plan, f, child)
          queue[#queue + 1] = {child, false}
        else
          workflow_cancel_all(plan, f)
        end
      end
    end
  end
end

-- Reads what the plan's releases and stops need, and touches every key workflow_write writes
-- (lib.lua's rule): call it once, after the last workflow_end or workflow_cancel_all, before the
-- script's first write.
-- Reads the fields `kinds` (`m:`, `j:`...) of every step `plan` releases: one HMGET a workflow.
local function workflow_prefetch_releases(plan, kinds)
  local wanted = {}
  for _, r in ipairs(plan.releases) do
    local list = wanted[r.f]
    if not list then
      list = {}
      wanted[r.f] = list
    end
    for _, kind in ipairs(kinds) do list[#list + 1] = kind .. r.name end
  end
  for f, list in pairs(wanted) do workflow_prefetch(f, list) end
end

-- On a cluster, every key workflow_touch and the writes after it may use (lib.lua's `need`):
-- the shard's, and those of the topics of the steps the plan releases, stops or drops (a
-- blocked step cancelled) and of the last step of each workflow it ends, read from the
-- workflows (declared by then) first.
local function workflow_need(plan)
  local p = plan.prefix
  local keys = {p .. 'jobs', p .. 'delayed', p .. 'counts', p .. 'cancels', p .. 'leases',
    p .. 'retain', p .. 'unique_for', p .. 'events', p .. 'workflows'}
  workflow_prefetch_releases(plan, {'m:'})
  local seen = {}
  local function add(member)
    local topic = member and topic_of(member)
    if topic and not seen[topic] then
      seen[topic] = true
      for _, kind in ipairs({'ready:', 'gen:', 'cancelled:', 'events:', 'done:'}) do
        keys[#keys + 1] = p .. kind .. topic
      end
      keys[#keys + 1] = ranked_key(p, topic)
    end
  end
  for _, r in ipairs(plan.releases) do add(workflow_get(r.f, 'm:' .. r.name)) end
  for _, st in ipairs(plan.stops) do add(st.member) end
  for _, d in ipairs(plan.dropped) do add(d.member) end
  for _, f in ipairs(plan.order) do
    if f.left <= 0 and f.last then add(workflow_get(f, 'm:' .. f.last)) end
  end
  need(keys)
end

local function workflow_touch(plan)
  local p = plan.prefix
  if CLUSTER then workflow_need(plan) end
  redis.call('EXISTS', p .. 'jobs', p .. 'delayed', p .. 'counts', p .. 'cancels')
  plan.before = earliest(p .. 'delayed')
  workflow_prefetch_releases(plan, {'m:', 'j:', 't:'})
  local lanes = {}
  for _, r in ipairs(plan.releases) do
    r.member = workflow_get(r.f, 'm:' .. r.name)
    r.raw = workflow_get(r.f, 'j:' .. r.name)
    r.delay = tonumber(workflow_get(r.f, 't:' .. r.name) or 0) or 0
    local topic = topic_of(r.member)
    if topic and not lanes[topic] then
      lanes[topic] = true
      touch_lanes(p, topic)
      redis.call('EXISTS', p .. 'gen:' .. topic)
    end
  end
  -- A member stopped twice (its workflow cancelled before, and again by this plan) once.
  local stops, stopping = {}, {}
  for _, st in ipairs(plan.stops) do
    if not stopping[st.member] then
      stopping[st.member] = true
      stops[#stops + 1] = st
    end
  end
  plan.stops = stops
  for _, st in ipairs(plan.stops) do
    local m = st.member
    local topic = topic_of(m)
    -- A job the calling script takes back from its dead worker now (reclaim) is not running
    -- any more: it is deleted as a waiting one, and the caller does not put it back in line.
    st.taken_back = plan.taking_back and plan.taking_back[m]
    st.token = not st.taken_back and redis.call('HGET', p .. 'leases', m)
    local raw = not st.token and redis.call('HGET', p .. 'jobs', m)
    if raw then
      -- Waiting (delayed or ready), or taken back: deleted, and its step ends cancelled now,
      -- as cancel.lua deletes a waiting job (its reservation goes; a topic that keeps its
      -- ends marks it cancelled, for the waits).
      st.waiting, st.runs = true, runs_of(raw)
      st.delayed = not st.taken_back and redis.call('ZSCORE', p .. 'delayed', m) ~= false
      st.spec = redis.call('HGET', p .. 'retain', topic)
      redis.call('EXISTS', p .. 'gen:' .. topic, p .. 'unique_for', p .. 'cancelled:' .. topic)
      workflow_end(plan, st.f, st.name, 'c', '')
      plan.gone[#plan.gone + 1] = m
      if st.taken_back then plan.stopped[m] = true end
    end
  end
  -- The blocked steps this plan cancels (all of them known by now: a stop above may cancel
  -- the steps after it): each is marked cancelled in a topic that keeps its ends, and
  -- announced, in workflow_write.
  local marks = {}
  for _, d in ipairs(plan.dropped) do
    d.topic = topic_of(d.member)
    if d.topic then marks[#marks + 1] = p .. 'cancelled:' .. d.topic end
  end
  if CLUSTER then need(marks) end -- (declared by workflow_need already: a check)
  for _, d in ipairs(plan.dropped) do
    d.spec = d.topic and redis.call('HGET', p .. 'retain', d.topic)
    if d.spec then redis.call('EXISTS', p .. 'cancelled:' .. d.topic) end
  end
  -- Job events (lib.lua's events): a released step's job is `pushed`, a stopped one
  -- `cancelled`, and an ended workflow is announced on the stream of its last step's topic
  -- (`workflow_ended`). Their streams are opened here, before the first write.
  local topics, seen = {}, {}
  local function add(member)
    local topic = member and topic_of(member)
    if topic and not seen[topic] then
      seen[topic] = true
      topics[#topics + 1] = topic
    end
  end
  for _, r in ipairs(plan.releases) do add(r.member) end
  for _, st in ipairs(plan.stops) do add(st.member) end
  for _, f in ipairs(plan.order) do
    if f.left <= 0 and f.last then
      f.last_member = workflow_get(f, 'm:' .. f.last)
      add(f.last_member)
    end
  end
  plan.streams = {}
  for topic, cap in pairs(events_on(p .. 'events', topics)) do
    plan.streams[topic] = events_open(p .. 'events:' .. topic, cap)
  end
end

-- What ending the jobs `ended` ({member, outcome, text}, outcome as workflow_end's) does to their
-- workflows; read-only, and nil when none of them is a step. `taken_back` (reclaim: the members
-- it puts back in line, or nil): those of a workflow cancelled as a whole are deleted instead
-- (`plan.stopped` names them: the caller leaves them out of line).
local function workflow_plan(prefix, ended, taken_back)
  taken_back = taken_back or {}
  if #ended + #taken_back == 0 or redis.call('EXISTS', prefix .. 'workflows') == 0 then return nil end
  local plan = workflow_new_plan(prefix)
  local members = {}
  for i, e in ipairs(ended) do members[i] = e[1] end
  for _, m in ipairs(taken_back) do members[#members + 1] = m end
  local refs = hmget_all(plan.steps_key, members)
  local any = false
  defer_needs() -- every workflow met named in one stop (lib.lua's `need`)
  for i, e in ipairs(ended) do
    local ref = refs[i]
    if ref then
      any = true
      plan.gone[#plan.gone + 1] = e[1]
      local colon = string.find(ref, ':', 1, true)
      local f = colon and workflow_open(plan, string.sub(ref, 1, colon - 1))
      if f then workflow_end(plan, f, string.sub(ref, colon + 1), e[2], e[3]) end
    end
  end
  plan.taking_back = {}
  for k, m in ipairs(taken_back) do
    local ref = refs[#ended + k]
    if ref then
      any = true
      plan.taking_back[m] = true
      local colon = string.find(ref, ':', 1, true)
      local f = colon and workflow_open(plan, string.sub(ref, 1, colon - 1))
      local name = f and string.sub(ref, colon + 1)
      -- A workflow cancelled before this call: its job does not go back in line. (One cancelled
      -- by this call stops it through workflow_cancel_all.)
      if f and f.whole and not f.cancel_done and workflow_get(f, 's:' .. name) == 'p' then
        plan.stops[#plan.stops + 1] = {f = f, name = name, member = m}
      end
    end
  end
  needs_met()
  if not any then return nil end
  workflow_touch(plan)
  return plan
end

-- Carries the plan out: the released steps' jobs pushed (due their delay from now), the
-- stopped ones deleted or asked to stop, each workflow's fields written (an ended one kept for
-- its `keep`), and the ended jobs' entries in `workflows` gone (last: the HDEL may delete it).
local function workflow_write(plan, now)
  if not plan then return end
  local p = plan.prefix
  local jobs, delayed, counts = p .. 'jobs', p .. 'delayed', p .. 'counts'
  -- The released steps' jobs: one HSET of their envelopes, one ZADD of those that wait, and
  -- per topic one push of those due now (lib.lua's ready lanes); their stored envelopes go.
  local envelopes, waiting, due_now, forgotten = {}, {}, {}, {}
  for _, r in ipairs(plan.releases) do
    if r.f.releasing[r.name] then
      local e = parse(r.raw)
      if e then
        local topic, id = split_member(r.member)
        e.due = now + r.delay
        push_all_pairs(envelopes, r.member, encode(e))
        if e.due <= now then
          local lane = due_now[topic]
          if not lane then
            lane = {ids = {}, levels = {}}
            due_now[topic] = lane
          end
          lane.ids[#lane.ids + 1] = id
          lane.levels[#lane.levels + 1] = e.priority
        else
          push_all_pairs(waiting, fmt(e.due), r.member)
          bump(counts, topic, 'delayed', 1)
        end
        r.pushed = {topic, id, e.due}
      end
      r.f.read['j:' .. r.name], r.f.read['t:' .. r.name] = false, false
      local list = forgotten[r.f]
      if not list then
        list = {}
        forgotten[r.f] = list
      end
      list[#list + 1] = 'j:' .. r.name
      list[#list + 1] = 't:' .. r.name
    end
  end
  push_all('HSET', jobs, envelopes)
  push_all('ZADD', delayed, waiting)
  for topic, lane in pairs(due_now) do
    to_ready(p, counts, topic, lane.ids, lane.levels)
    ring(p, topic)
  end
  for f, list in pairs(forgotten) do push_all('HDEL', f.key, list) end
  for _, st in ipairs(plan.stops) do
    if st.token then
      redis.call('HSET', p .. 'cancels', st.member, st.token)
      redis.call('PUBLISH', p .. 'wake', 'cancel ' .. st.member)
    end
  end
  for _, f in ipairs(plan.order) do
    local args = {'left', fmt(f.left)}
    for field, value in pairs(f.set) do
      args[#args + 1] = field
      args[#args + 1] = value
    end
    local ends = f.left <= 0 and f.was_left > 0
    if ends then
      args[#args + 1] = 'ended'
      args[#args + 1] = fmt(now)
    end
    push_all('HSET', f.key, args)
    if ends then redis.call('PEXPIRE', f.key, math.max(1, math.floor(f.keep / 1000))) end
  end
  if #plan.releases > 0 then announce(p, delayed, plan.before) end
  -- The jobs and blocked steps this plan cancelled, announced in one message (one member a
  -- line): a workflow of a thousand steps cancelled is one message, which a cluster copies to
  -- every node, not a thousand.
  local ended = {}
  for _, st in ipairs(plan.stops) do
    if st.waiting then
      local topic, id = split_member(st.member)
      if not st.delayed and not st.taken_back then
        invalidate(p .. 'gen:' .. topic, counts, topic, id)
      end
      if st.spec then bury(p .. 'cancelled:' .. topic, st.member, st.spec, now) end
      ended[#ended + 1] = st.member
    end
  end
  for _, d in ipairs(plan.dropped) do
    if d.spec then bury(p .. 'cancelled:' .. d.topic, d.member, d.spec, now) end
    ended[#ended + 1] = d.member
  end
  if #ended > 0 then redis.call('PUBLISH', p .. 'ended', table.concat(ended, '\n')) end
end

-- The plan's deletes (the jobs of waiting steps a workflow's cancel stopped, and the
-- `workflows` entries of the steps that ended), then its job events, after the calling
-- script's own (so a step's `succeeded` comes before the `pushed` of what it released, and
-- before `workflow_ended`): call it last, after the script's own writes (each delete may delete
-- the key it names; the members it deletes are there, so no key the script deleted is used).
local function workflow_finish(plan, now)
  if not plan then return end
  local p = plan.prefix
  for _, st in ipairs(plan.stops) do
    if st.waiting then
      if st.delayed then
        redis.call('ZREM', p .. 'delayed', st.member)
        bump(p .. 'counts', topic_of(st.member), 'delayed', -1)
      end
      redis.call('HDEL', p .. 'jobs', st.member)
      redis.call('HDEL', p .. 'unique_for', st.member)
    end
  end
  if #plan.gone > 0 then redis.call('HDEL', plan.steps_key, unpack(plan.gone)) end
  if not next(plan.streams) then return end
  local stamp = fmt(now)
  for _, r in ipairs(plan.releases) do
    local stream = r.pushed and plan.streams[r.pushed[1]]
    if stream then
      if r.pushed[3] > now then
        emit_event(stream, 'pushed', r.pushed[2], 0, stamp, 'd', fmt(r.pushed[3]))
      else
        emit_event(stream, 'pushed', r.pushed[2], 0, stamp)
      end
    end
  end
  for _, st in ipairs(plan.stops) do
    local topic, id = split_member(st.member)
    if st.waiting and plan.streams[topic] then
      emit_event(plan.streams[topic], 'cancelled', id, st.runs, stamp)
    end
  end
  for _, f in ipairs(plan.order) do
    local topic, id = split_member(f.last_member or '')
    if f.left <= 0 and topic and plan.streams[topic] then
      local state = 'succeeded'
      for name in string.gmatch(f.steps, '[^,]+') do
        local s = workflow_get(f, 's:' .. name)
        if s == 'f' then
          state = 'failed'
          break
        elseif s == 'c' then
          state = 'cancelled'
        end
      end
      if f.whole and state == 'succeeded' then state = 'cancelled' end
      local args = {'XADD', plan.streams[topic].key, 'MINID', '~', nil, nil}
      local stream = plan.streams[topic]
      stream.n = stream.n + 1
      args[5], args[6] = stream_floor(stream), stream_id(stream)
      for _, v in ipairs({'n', fmt(stream.n), 'k', 'workflow_ended', 'id', id, 'a', '0', 't', stamp,
                          'w', string.sub(f.key, #plan.prefix + 10), 's', state}) do
        args[#args + 1] = v
      end
      append_entry(args)
    end
  end
end

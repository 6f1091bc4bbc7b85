-- release: returns jobs the caller holds to the front of their ready lists at once, without
-- counting a run (graceful shutdown interrupted them; they did not fail).
-- KEYS[1] inflight  KEYS[2] counts  KEYS[3] leases  KEYS[4] cancels (a cancel's request goes
-- with the lease)  KEYS[5] jobs  KEYS[6] events: when a topic's job events are on, each job
-- released is announced on its stream (`released`, with its run, read from its envelope)
-- KEYS[7] progress (the released jobs' entries go)
-- KEYS[8..] ready:<topic>, gen:<topic>, events:<topic> and ranked:<topic> of every topic in the
--   call (declared for a cluster's reshard: see push.lua), then any key a stop named (lib.lua's
--   `need`)
-- ARGV[1] key prefix, then member_1, token_1, ... (at most 1000 pairs)
-- Returns {released, asked_member_1, ...}: a job whose cancel was requested against this very
-- lease (cancel.lua) is not put back but left as it is, for the store to delete as cancelled
-- (cancel_running.lua; retry.lua says why).
-- Reads first (tokens, and a touch of each ready list), writes after; ZREM inflight last.
local inflight, counts, leases, progress = KEYS[1], KEYS[2], KEYS[3], KEYS[7]
local prefix = ARGV[1]
local members = {}
for i = 2, #ARGV, 2 do members[#members + 1] = ARGV[i] end
if #members == 0 then return {0} end
local tokens = redis.call('HMGET', leases, unpack(members))
local cancelled = redis.call('EXISTS', KEYS[4]) == 1
local requests = cancelled and redis.call('HMGET', KEYS[4], unpack(members)) or {}
local held, by_topic, order, seen, asked = {}, {}, {}, {}, {}
for k, member in ipairs(members) do
  if not seen[member] and tokens[k] == ARGV[2 * k + 1] and requests[k] == tokens[k] then
    seen[member] = true
    asked[#asked + 1] = member
  elseif not seen[member] and tokens[k] == ARGV[2 * k + 1] then
    seen[member] = true
    local topic, id = split_member(member)
    if not by_topic[topic] then
      by_topic[topic] = {}
      order[#order + 1] = topic
      touch_lanes(prefix, topic)
    end
    local list = by_topic[topic]
    list[#list + 1] = id
    held[#held + 1] = member
  end
end
if #held == 0 then return {0, unpack(asked)} end
-- Each job goes back first of its priority (lib.lua's ready lanes).
local priorities = {}
local raws = redis.call('HMGET', KEYS[5], unpack(held))
for k, member in ipairs(held) do
  local topic = topic_of(member)
  priorities[topic] = priorities[topic] or {}
  table.insert(priorities[topic], priority_of(raws[k]))
end
local reported = has_progress(progress)
-- Job events: the streams of the call's topics that have them on, and the runs of their jobs.
local streams, runs = {}, {}
for topic, cap in pairs(events_on(KEYS[6], order)) do
  streams[topic] = events_open(prefix .. 'events:' .. topic, cap)
end
if next(streams) then
  local announced = {}
  for _, member in ipairs(held) do
    if streams[topic_of(member)] then announced[#announced + 1] = member end
  end
  for k, counted in ipairs(runs_of_all(KEYS[5], announced)) do runs[announced[k]] = counted + 1 end
end
proceed_when_full(leases) -- a release must go through when Redis is full
for _, topic in ipairs(order) do
  -- One LPUSH of a, b, c leaves c first, as one LPUSH each in turn did.
  to_ready(prefix, counts, topic, by_topic[topic], priorities[topic], true)
  ring(prefix, topic)
  bump(counts, topic, 'inflight', -#by_topic[topic])
end
if cancelled then redis.call('HDEL', KEYS[4], unpack(held)) end
end_leases(inflight, leases, held)
if reported then clear_progress(progress, held) end
if next(streams) then
  local stamp = fmt(now_us())
  local batch = {}
  for _, member in ipairs(held) do
    local topic = topic_of(member)
    if streams[topic] then
      local b = batch[topic] or {ids = {}, runs = {}}
      batch[topic] = b
      b.ids[#b.ids + 1] = string.sub(member, #topic + 2)
      b.runs[#b.runs + 1] = runs[member]
    end
  end
  for topic, b in pairs(batch) do emit_events(streams[topic], 'released', b.ids, b.runs, stamp) end
end
return {#held, unpack(asked)}

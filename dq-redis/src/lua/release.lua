-- release: returns jobs the caller holds to the front of their ready lists at once, without
-- counting a run (graceful shutdown interrupted them; they did not fail).
-- KEYS[1] inflight  KEYS[2] counts  KEYS[3] leases  KEYS[4] cancels (a cancel's request goes
-- with the lease)
-- KEYS[5..] ready:<topic> and gen:<topic> of every topic in the call (declared for a cluster's reshard: see
--   push.lua), then progress (the last key: the released jobs' entries go)
-- ARGV[1] key prefix, then member_1, token_1, ... (at most 1000 pairs)
-- Returns the number released.
-- Reads first (tokens, and a touch of each ready list), writes after; ZREM inflight last.
local inflight, counts, leases, progress = KEYS[1], KEYS[2], KEYS[3], KEYS[#KEYS]
local prefix = ARGV[1]
local members = {}
for i = 2, #ARGV, 2 do members[#members + 1] = ARGV[i] end
if #members == 0 then return 0 end
local tokens = redis.call('HMGET', leases, unpack(members))
local held, by_topic, order, seen = {}, {}, {}, {}
for k, member in ipairs(members) do
  if not seen[member] and tokens[k] == ARGV[2 * k + 1] then
    seen[member] = true
    local topic, id = split_member(member)
    if not by_topic[topic] then
      by_topic[topic] = {}
      order[#order + 1] = topic
      redis.call('LLEN', prefix .. 'ready:' .. topic) -- touch
    end
    local list = by_topic[topic]
    list[#list + 1] = id
    held[#held + 1] = member
  end
end
if #held == 0 then return 0 end
local cancelled = redis.call('EXISTS', KEYS[4]) == 1
local reported = has_progress(progress)
proceed_when_full(leases) -- a release must go through when Redis is full
for _, topic in ipairs(order) do
  -- One LPUSH of a, b, c leaves c first, as one LPUSH each in turn did.
  push_all('LPUSH', prefix .. 'ready:' .. topic, entries_for(prefix .. 'gen:' .. topic, by_topic[topic]))
  ring(prefix, topic)
  bump(counts, topic, 'inflight', -#by_topic[topic])
end
if cancelled then redis.call('HDEL', KEYS[4], unpack(held)) end
end_leases(inflight, leases, held)
if reported then clear_progress(progress, held) end
return #held

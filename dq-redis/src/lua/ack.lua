-- ack: completes jobs whose lease the caller still holds; refuses stale ones.
-- Batched: one HMGET, one ZREM and two HDELs for the whole batch.
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] counts  KEYS[4] leases  KEYS[5] unique  KEYS[6] unique_for
-- A job pushed with unique_for keeps its id reserved (in `unique`) for that long from now.
-- ARGV: member_1, token_1, member_2, token_2, ... (at most 1000 pairs)
-- Returns {acked, stale_member_1, ...}: a stale member's lease was taken over (or it was cancelled).
local jobs, inflight, counts, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local members, tokens = {}, {}
for i = 1, #ARGV, 2 do
  members[#members + 1] = ARGV[i]
  tokens[#tokens + 1] = ARGV[i + 1]
end
local out = {0}
if #members == 0 then return out end
local held = redis.call('HMGET', leases, unpack(members))
local done, per_topic, seen = {}, {}, {}
for i, member in ipairs(members) do
  if held[i] == tokens[i] and not seen[member] then
    seen[member] = true
    done[#done + 1] = member
    local topic = topic_of(member)
    per_topic[topic] = (per_topic[topic] or 0) + 1
  else
    out[#out + 1] = member
  end
end
local now = #done > 0 and now_us()
local holds = #done > 0 and redis.call('EXISTS', KEYS[6]) == 1 and redis.call('HMGET', KEYS[6], unpack(done))
if #done > 0 then proceed_when_full(leases) end -- an ack must go through when Redis is full
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
if #done > 0 then
  end_leases(inflight, leases, done)
  redis.call('HDEL', jobs, unpack(done))
end
out[1] = #done
for topic, k in pairs(per_topic) do
  bump(counts, topic, 'inflight', -k)
  tally(counts, topic, 'done', k, now)
end
if #released > 0 then redis.call('HDEL', KEYS[6], unpack(released)) end
return out

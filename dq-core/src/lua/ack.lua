-- ack: completes jobs whose lease the caller still holds; refuses stale ones.
-- Batched: one ZMSCORE, one HMGET, one ZREM and one HDEL for the whole batch.
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] counts
-- ARGV: member_1, lease_1, member_2, lease_2, ... (at most 1000 pairs)
-- Returns {acked, stale_member_1, ...}: a stale member's lease was taken over (or it was cancelled).
local jobs, inflight, counts = KEYS[1], KEYS[2], KEYS[3]
local members, leases = {}, {}
for i = 1, #ARGV, 2 do
  members[#members + 1] = ARGV[i]
  leases[#leases + 1] = tonumber(ARGV[i + 1])
end
local out = {0}
if #members == 0 then return out end
local scores = redis.call('ZMSCORE', inflight, unpack(members))
local raws = redis.call('HMGET', jobs, unpack(members))
local done, per_topic, seen = {}, {}, {}
for i, member in ipairs(members) do
  if scores[i] and not seen[member] and lease_of(raws[i]) == leases[i] then
    seen[member] = true
    done[#done + 1] = member
    local topic = topic_of(member)
    per_topic[topic] = (per_topic[topic] or 0) + 1
  else
    out[#out + 1] = member
  end
end
if #done > 0 then
  redis.call('ZREM', inflight, unpack(done))
  redis.call('HDEL', jobs, unpack(done))
end
out[1] = #done
for topic, k in pairs(per_topic) do bump(counts, topic, 'inflight', -k) end
return out

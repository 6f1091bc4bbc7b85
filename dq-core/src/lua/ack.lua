-- ack: completes jobs whose lease the caller still holds; refuses stale ones.
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] counts
-- ARGV: member_1, lease_1, member_2, lease_2, ... (at most 1000 pairs)
-- Returns {acked, stale_member_1, ...}: a stale member's lease was taken over (or it was cancelled).
local jobs, inflight, counts = KEYS[1], KEYS[2], KEYS[3]
local out = {0}
local done = {}
for i = 1, #ARGV, 2 do
  local member, lease = ARGV[i], tonumber(ARGV[i + 1])
  if redis.call('ZSCORE', inflight, member) and lease_of(redis.call('HGET', jobs, member)) == lease then
    redis.call('ZREM', inflight, member)
    redis.call('HDEL', jobs, member)
    out[1] = out[1] + 1
    local topic = split_member(member)
    done[topic] = (done[topic] or 0) + 1
  else
    out[#out + 1] = member
  end
end
for topic, k in pairs(done) do bump(counts, topic, 'inflight', -k) end
return out

-- release: returns jobs the caller holds to the front of their ready lists at once, without
-- counting a run (graceful shutdown interrupted them; they did not fail).
-- KEYS[1] inflight  KEYS[2] counts  KEYS[3] leases
-- ARGV[1] key prefix, then member_1, token_1, ... (at most 1000 pairs)
-- Returns the number released.
local inflight, counts, leases = KEYS[1], KEYS[2], KEYS[3]
local prefix = ARGV[1]
local released = 0
for i = 2, #ARGV, 2 do
  local member, token = ARGV[i], ARGV[i + 1]
  if redis.call('HGET', leases, member) == token then
    end_leases(inflight, leases, {member})
    local topic, id = split_member(member)
    redis.call('LPUSH', prefix .. 'ready:' .. topic, id)
    ring(prefix, topic)
    bump(counts, topic, 'inflight', -1)
    released = released + 1
  end
end
return released

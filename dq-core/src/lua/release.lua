-- release: returns jobs the caller holds to the front of their ready lists at once, without
-- counting the attempt (graceful shutdown interrupted them; they did not fail).
-- KEYS[1] jobs  KEYS[2] inflight  KEYS[3] counts
-- ARGV[1] key prefix, then member_1, lease_1, ... (at most 1000 pairs)
-- Returns the number released.
local jobs, inflight, counts = KEYS[1], KEYS[2], KEYS[3]
local prefix = ARGV[1]
local released = 0
for i = 2, #ARGV, 2 do
  local member, lease = ARGV[i], tonumber(ARGV[i + 1])
  local e = parse(redis.call('HGET', jobs, member))
  if e and e.lease == lease and redis.call('ZREM', inflight, member) == 1 then
    local topic, id = split_member(member)
    e.attempt = math.max(e.attempt - 1, 0)
    redis.call('HSET', jobs, member, encode(e))
    redis.call('LPUSH', prefix .. 'ready:' .. topic, id)
    ring(prefix, topic)
    bump(counts, topic, 'inflight', -1)
    released = released + 1
  end
end
return released

-- extend: renews the leases of running jobs (one heartbeat call for all of a worker's jobs).
-- KEYS[1] jobs  KEYS[2] inflight
-- ARGV[1] lease length (us), then member_1, lease_1, ... (at most 1000 pairs)
-- Returns the members whose lease the caller no longer holds.
local jobs, inflight = KEYS[1], KEYS[2]
local deadline = fmt(now_us() + tonumber(ARGV[1]))
local lost = {}
for i = 2, #ARGV, 2 do
  local member, lease = ARGV[i], tonumber(ARGV[i + 1])
  if redis.call('ZSCORE', inflight, member) and lease_of(redis.call('HGET', jobs, member)) == lease then
    redis.call('ZADD', inflight, 'XX', deadline, member)
  else
    lost[#lost + 1] = member
  end
end
return lost

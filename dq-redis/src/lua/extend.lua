-- extend: renews the leases of running jobs (one heartbeat call for all of a worker's jobs).
-- KEYS[1] inflight  KEYS[2] leases
-- ARGV[1] lease length (us), then member_1, token_1, ... (at most 1000 pairs)
-- Returns the members whose lease the caller no longer holds.
local inflight, leases = KEYS[1], KEYS[2]
local deadline = fmt(now_us() + tonumber(ARGV[1]))
local members = {}
for i = 2, #ARGV, 2 do members[#members + 1] = ARGV[i] end
local lost = {}
if #members == 0 then return lost end
local held = redis.call('HMGET', leases, unpack(members))
local renew = {}
for i, member in ipairs(members) do
  if held[i] == ARGV[2 * i + 1] then
    renew[#renew + 1] = deadline
    renew[#renew + 1] = member
  else
    lost[#lost + 1] = member
  end
end
if #renew > 0 then
  proceed_when_full(leases) -- a renewal must go through when Redis is full
  redis.call('ZADD', inflight, 'XX', unpack(renew))
end
return lost

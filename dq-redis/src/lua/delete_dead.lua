-- delete_dead: deletes the given ids of a topic that are dead letters now, and nothing else: an
-- id pushed again since it died (pending now, its own new job) or retried is left alone.
-- KEYS[1] jobs  KEYS[2] dead:<topic>  KEYS[3] unique_for
-- ARGV[1] topic  then the ids (at most 1000)
-- Returns the number deleted.
-- Every key is read before the first write, and the writes that may delete a key come after
-- every other use of it (lib.lua's rule: a redirect mid-script on a cluster must find nothing
-- changed).
local jobs, dead, unique_for = KEYS[1], KEYS[2], KEYS[3]
local topic = ARGV[1]
local members, seen = {}, {}
for i = 2, math.min(#ARGV, 1001) do
  local member = topic .. ':' .. ARGV[i]
  if not seen[member] then
    seen[member] = true
    if redis.call('ZSCORE', dead, member) then members[#members + 1] = member end
  end
end
if #members == 0 then return 0 end
-- Touch the two hashes written below (a dead letter's envelope is in `jobs`).
redis.call('HEXISTS', jobs, members[1])
redis.call('HEXISTS', unique_for, members[1])
redis.call('HDEL', jobs, unpack(members))
redis.call('HDEL', unique_for, unpack(members))
redis.call('ZREM', dead, unpack(members))
return #members

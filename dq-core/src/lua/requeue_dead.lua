-- requeue_dead: gives dead letters a fresh set of attempts, ready to run now.
-- KEYS[1] jobs  KEYS[2] dead:<topic>
-- ARGV[1] key prefix  ARGV[2] topic  ARGV[3] max_attempts for the new run
-- ARGV[4] most jobs (at most 1000), then the ids to requeue (none: the oldest dead letters)
-- Returns the number requeued.
local jobs, dead = KEYS[1], KEYS[2]
local prefix, topic, max, limit = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local members = {}
if #ARGV > 4 then
  for i = 5, math.min(#ARGV, 4 + limit) do members[#members + 1] = topic .. ':' .. ARGV[i] end
else
  members = redis.call('ZRANGE', dead, 0, limit - 1)
end
local now = now_us()
local n = 0
for _, member in ipairs(members) do
  if redis.call('ZREM', dead, member) == 1 then
    local e = parse(redis.call('HGET', jobs, member))
    local _, id = split_member(member)
    if e then
      e.attempt = 0
      e.max = max
      e.due = now
      redis.call('HSET', jobs, member, encode(e))
      redis.call('RPUSH', prefix .. 'ready:' .. topic, id)
      ring(prefix, topic)
      n = n + 1
    else
      -- Nothing readable to run: keep it dead rather than lose it.
      redis.call('ZADD', dead, now, member)
    end
  end
end
return n

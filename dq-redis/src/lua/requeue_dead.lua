-- requeue_dead: gives dead letters a fresh set of attempts, ready to run now.
-- KEYS[1] jobs  KEYS[2] dead:<topic>  KEYS[3] ready:<topic>  KEYS[4] gen:<topic>  KEYS[5] counts
-- KEYS[6] ranked:<topic> (a dead letter with a priority goes back to it: lib.lua's ready lanes)
-- ARGV[1] key prefix  ARGV[2] topic  ARGV[3] max_attempts for the new run
-- ARGV[4] most jobs (at most 1000)  ARGV[5] died at or before (us; used without ids)
-- then the ids to requeue (none: the oldest dead letters that died by ARGV[5])
-- A dead letter of a group goes in through its group (lib.lua's groups): it may wait there,
-- parked, for a slot.
-- Returns the number requeued.
-- Every read comes before the first write (see lib.lua's rule: a redirect mid-script on a cluster
-- must find nothing changed).
local jobs, dead, ready = KEYS[1], KEYS[2], KEYS[3]
local prefix, topic = ARGV[1], ARGV[2]
local max, limit = tonumber(ARGV[3]), math.min(tonumber(ARGV[4]), 1000)
local members = {}
if #ARGV > 5 then
  for i = 6, math.min(#ARGV, 5 + limit) do members[#members + 1] = topic .. ':' .. ARGV[i] end
else
  members = redis.call('ZRANGEBYSCORE', dead, '-inf', ARGV[5], 'LIMIT', 0, limit)
end
local now = now_us()
local writes, ids, levels, gone, seen, unreadable = {}, {}, {}, {}, {}, {}
local entering = {}
touch_lanes(prefix, topic)
redis.call('HGET', KEYS[5], topic .. ':seq') -- counts: to_ready counts the ranked jobs there
for _, member in ipairs(members) do
  if not seen[member] and redis.call('ZSCORE', dead, member) then
    seen[member] = true
    local e = parse(redis.call('HGET', jobs, member))
    -- An unreadable one stays dead (nothing to run, nothing lost), stamped now: behind the
    -- cutoff of a retry-all under way, so that it cannot block the ones after it.
    if not e then
      unreadable[#unreadable + 1] = fmt(now)
      unreadable[#unreadable + 1] = member
    else
      local _, id = split_member(member)
      e.attempt = 0
      e.max = max
      e.due = now
      writes[#writes + 1] = member
      writes[#writes + 1] = encode(e)
      if e.group ~= '' then
        entering[#entering + 1] = {id, e.group, e.priority}
      else
        ids[#ids + 1] = id
        levels[#ids] = e.priority
      end
      gone[#gone + 1] = member
    end
  end
end
local plan = #entering > 0 and plan_enter(prefix, topic, entering)
if #unreadable > 0 then redis.call('ZADD', dead, unpack(unreadable)) end
if #gone == 0 then return 0 end
redis.call('HSET', jobs, unpack(writes))
if #ids > 0 then
  to_ready(prefix, KEYS[5], topic, ids, levels)
  ring(prefix, topic)
end
if plan then
  redis.call('HSET', KEYS[5], topic .. ':grouped', 1)
  write_enter(plan, KEYS[5])
end
redis.call('ZREM', dead, unpack(gone))
return #gone

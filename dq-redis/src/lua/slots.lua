-- slots: a topic's global concurrency over a namespace of several shards, counted in its first
-- shard for all of them (the shards' `<topic>:running` read `home:<limit>`, and their
-- fetch.lua leases no job of the topic without a grant of slots from here). Counted by grant:
-- each fetch's grant holds some slots until its jobs end or its time runs out, O(1) a call
-- whatever the number of jobs or slots.
-- KEYS[1] limits (of the first shard)
-- KEYS[2] gslots:<topic> (of the first shard): `:held` -> the slots held in all, and each live
--   grant's name -> how many slots it holds
-- KEYS[3] gslotx:<topic> (of the first shard): each live grant scored by when it runs out (us,
--   this server's clock): a lease from the grant or from its jobs' last renewal. A grant whose
--   time has passed gives its slots back (the next grant looks): a killed worker's slots come
--   back within a lease, and none is given twice while its jobs' leases run.
-- ARGV[1] topic  ARGV[2] what:
--   'grant', ARGV[3] most wanted, ARGV[4] lease length (us), ARGV[5] the grant's name (unique
--     among processes): up to that many slots. Returns {granted, limit}; granted -1 (limit 0)
--     when the topic has no global concurrency counted here (it was lifted).
--   'free', ARGV[3..] pairs of a grant's name and how many of its slots go back (its fetch
--     leased fewer jobs, or they ended: their end was written, or their lease was lost): a
--     grant whose time ran out gave them back already. Returns how many went.
--   'renew', ARGV[3] lease length (us), ARGV[4..] names of grants whose jobs' leases were
--     extended: they run out a lease from now (a grant gone stays gone). Returns 0.
-- Allowed when Redis is full: at most one field and member a running fetch.
local limits, held_key, times, what = KEYS[1], KEYS[2], KEYS[3], ARGV[2]
if what == 'grant' then
  local spec = redis.call('HGET', limits, ARGV[1] .. ':running')
  local limit = tonumber(string.match(spec or '', '^home:(%d+)$') or '')
  if not limit then return {-1, 0} end
  local now = now_us()
  -- Every read before the first write: a write may delete a key.
  local held = tonumber(redis.call('HGET', held_key, ':held') or '0')
  local expired = redis.call('ZRANGEBYSCORE', times, '-inf', '(' .. fmt(now))
  local counts = #expired > 0 and redis.call('HMGET', held_key, unpack(expired)) or {}
  for _, c in ipairs(counts) do held = held - tonumber(c or '0') end
  held = math.max(held, 0)
  local n = math.max(math.min(tonumber(ARGV[3]), limit - held), 0)
  proceed_when_full(limits)
  if n > 0 then
    redis.call('HSET', held_key, ':held', fmt(held + n), ARGV[5], fmt(n))
    redis.call('ZADD', times, fmt(now + tonumber(ARGV[4])), ARGV[5])
  else
    redis.call('HSET', held_key, ':held', fmt(held))
  end
  if #expired > 0 then
    redis.call('HDEL', held_key, unpack(expired))
    redis.call('ZREM', times, unpack(expired))
  end
  return {n, limit}
end
if what == 'free' then
  local names, back = {}, {}
  for i = 3, #ARGV - 1, 2 do
    names[#names + 1] = ARGV[i]
    back[#back + 1] = tonumber(ARGV[i + 1])
  end
  if #names == 0 then return 0 end
  local held = tonumber(redis.call('HGET', held_key, ':held') or '0')
  local counts = redis.call('HMGET', held_key, unpack(names))
  local left, gone, freed, now_left = {}, {}, 0, {}
  for i, name in ipairs(names) do
    local c = now_left[name] or tonumber(counts[i] or '0')
    local n = math.min(back[i], c)
    now_left[name] = c - n
    freed = freed + n
  end
  for name, c in pairs(now_left) do
    if c > 0 then
      left[#left + 1] = name
      left[#left + 1] = fmt(c)
    else
      gone[#gone + 1] = name
    end
  end
  proceed_when_full(limits)
  redis.call('HSET', held_key, ':held', fmt(math.max(held - freed, 0)), unpack(left))
  if #gone > 0 then
    redis.call('HDEL', held_key, unpack(gone))
    redis.call('ZREM', times, unpack(gone))
  end
  return freed
end
if what == 'renew' then
  local adds, until_us = {}, fmt(now_us() + tonumber(ARGV[3]))
  for i = 4, #ARGV do
    adds[#adds + 1] = until_us
    adds[#adds + 1] = ARGV[i]
  end
  if #adds > 0 then
    proceed_when_full(limits)
    redis.call('ZADD', times, 'XX', unpack(adds))
  end
  return 0
end
return redis.error_reply('slots.lua: unknown operation ' .. tostring(what))

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
--     among processes): up to that many slots. The same grant asked again (a cluster client
--     resends a request after a dropped connection) answers what it holds and takes no more.
--     Returns {granted, limit}; granted -1 (limit 0) when the topic has no global concurrency
--     counted here (it was lifted).
--   'free', ARGV[3..] pairs of a grant's name and how many of its slots it still needs (its
--     fetch leased fewer jobs, or some of them ended: their end was written, or their lease was
--     lost): it keeps no more than that, so a call sent twice, or two in either order, give
--     back each slot once; a grant whose time ran out gave them all back already. Returns how
--     many went.
--   'renew', ARGV[3] lease length (us), then pairs as 'free's, of grants whose jobs' leases
--     were extended: each keeps no more than it needs (a give-back lost on its way is made
--     good) and runs out a lease from now (a grant gone stays gone). Returns how many went.
-- Allowed when Redis is full: at most one field and member a running fetch.
local limits, held_key, times, what = KEYS[1], KEYS[2], KEYS[3], ARGV[2]
-- Each grant of `wanted` (pairs of a name and a count) keeps no more than its count: returns
-- the slots given back, and the grants left holding some (name, count pairs; those left with
-- none go).
local function keep_at_most(wanted)
  if #wanted == 0 then return 0, {} end
  local names, need = {}, {}
  for i = 1, #wanted - 1, 2 do
    names[#names + 1] = wanted[i]
    need[#need + 1] = tonumber(wanted[i + 1])
  end
  local held = tonumber(redis.call('HGET', held_key, ':held') or '0')
  local counts = redis.call('HMGET', held_key, unpack(names))
  local now_held, freed = {}, 0
  for i, name in ipairs(names) do
    local c = now_held[name] or tonumber(counts[i] or '0')
    local keep = math.min(c, need[i])
    now_held[name] = keep
    freed = freed + c - keep
  end
  local left, gone = {}, {}
  for name, c in pairs(now_held) do
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
  return freed, left
end
if what == 'grant' then
  local spec = redis.call('HGET', limits, ARGV[1] .. ':running')
  local limit = tonumber(string.match(spec or '', '^home:(%d+)$') or '')
  if not limit then return {-1, 0} end
  local name = ARGV[5]
  local again = redis.call('HGET', held_key, name)
  if again then return {tonumber(again), limit} end
  local now = now_us()
  -- Every read before the first write: a write may delete a key. No live grant: nothing is
  -- held, whatever the total says.
  local held = tonumber(redis.call('HGET', held_key, ':held') or '0')
  if redis.call('ZCARD', times) == 0 then held = 0 end
  local expired = redis.call('ZRANGEBYSCORE', times, '-inf', '(' .. fmt(now), 'LIMIT', 0, 1000)
  local counts = #expired > 0 and redis.call('HMGET', held_key, unpack(expired)) or {}
  for _, c in ipairs(counts) do held = held - tonumber(c or '0') end
  held = math.max(held, 0)
  local n = math.max(math.min(tonumber(ARGV[3]), limit - held), 0)
  proceed_when_full(limits)
  if n > 0 then
    redis.call('HSET', held_key, ':held', fmt(held + n), name, fmt(n))
    redis.call('ZADD', times, fmt(now + tonumber(ARGV[4])), name)
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
  local pairs_in = {}
  for i = 3, #ARGV do pairs_in[#pairs_in + 1] = ARGV[i] end
  local freed = keep_at_most(pairs_in)
  return freed
end
if what == 'renew' then
  local pairs_in = {}
  for i = 4, #ARGV do pairs_in[#pairs_in + 1] = ARGV[i] end
  local freed, left = keep_at_most(pairs_in)
  local adds, until_us = {}, fmt(now_us() + tonumber(ARGV[3]))
  for i = 1, #left - 1, 2 do
    adds[#adds + 1] = until_us
    adds[#adds + 1] = left[i]
  end
  if #adds > 0 then redis.call('ZADD', times, 'XX', unpack(adds)) end
  return freed
end
return redis.error_reply('slots.lua: unknown operation ' .. tostring(what))

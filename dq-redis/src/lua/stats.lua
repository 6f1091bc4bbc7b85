-- stats: a topic's counts, how late its oldest ready job is, its next due time, whether it is
-- paused (read-only, bounded: the next due time is looked for among the shard's first 1000
-- delayed entries, and its first 1000 parts of far jobs: lib.lua).
-- KEYS[1] counts  KEYS[2] ready:<topic>  KEYS[3] dead:<topic>  KEYS[4] jobs  KEYS[5] delayed
-- KEYS[6] paused  KEYS[7] gen:<topic>  KEYS[8] done:<topic>  KEYS[9] ranked:<topic> (lib.lua's
--   ready lanes)
-- The oldest ready job is looked for among the first live entries of each lane: the list and
-- each priority of the ranked set (a job of a low priority may wait behind younger ones of a
-- higher one: its wait is what shows it starving).
-- Groups (lib.lua): ready counts the jobs waiting for a slot of their group too, the oldest of
-- them is looked at (the first parked), and the busiest groups follow: the 10 with the most jobs
-- parked, each with how many and how many slots it holds; and the topic's group concurrency.
-- ARGV[1] topic  ARGV[2] 'far' where far jobs may be (lib.lua)
-- Returns {delayed, ready, running, dead, done, oldest_ready_due_us or -1, next_due_us or -1,
--   paused, now_us, group_concurrency or -1, group_1, parked_1, held_1, ...} (the head as
--   counts.lua's; done: the records of succeeded jobs kept).
local counts, ready, dead, jobs, delayed, paused = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local topic = ARGV[1]
local oldest = -1
-- The first live entry among the first 10 (stale ones, lib.lua, are no jobs).
local heads = {live_entries(KEYS[7], redis.call('LRANGE', ready, 0, 9))[1]}
if redis.call('EXISTS', KEYS[9]) == 1 then
  for lane = 0, 2 * MAX_PRIORITY do
    local from = lane * LANE
    local entries = redis.call('ZRANGEBYSCORE', KEYS[9], fmt(from), '(' .. fmt(from + LANE), 'LIMIT', 0, 10)
    heads[#heads + 1] = live_entries(KEYS[7], entries)[1]
  end
end
local gk = group_keys(string.sub(counts, 1, -7), topic)
heads[#heads + 1] = redis.call('ZRANGE', gk.parked, 0, 0)[1]
for _, id in pairs(heads) do
  local raw = redis.call('HGET', jobs, topic .. ':' .. id)
  local due = tonumber(raw and string.match(raw, '^[234]:%d+:%d+:%d+:(%d+):') or '')
  if due and (oldest == -1 or due < oldest) then oldest = due end
end
if oldest ~= -1 then oldest = fmt(oldest) end
local next_due = -1
local window = redis.call('ZRANGE', delayed, 0, 999, 'WITHSCORES')
local prefix = topic .. ':'
for i = 1, #window, 2 do
  if string.sub(window[i], 1, #prefix) == prefix then
    next_due = window[i + 1]
    break
  end
end
-- Or the earliest of its far jobs (lib.lua), among the first 1000 parts: a part's score is
-- the earliest due time written into it (a job cancelled since may have had it).
if ARGV[2] == 'far' then need({gk.prefix .. 'far'}) end -- declared on a cluster (lib.lua)
local parts = ARGV[2] == 'far' and redis.call('ZRANGE', gk.prefix .. 'far', 0, 999, 'WITHSCORES') or {}
for i = 1, #parts, 2 do
  if string.match(parts[i], '^%w+:%d+:(.*)$') == topic then
    if next_due == -1 or tonumber(parts[i + 1]) < tonumber(next_due) then next_due = parts[i + 1] end
    break
  end
end
local out = {
  tonumber(redis.call('HGET', counts, topic .. ':delayed') or 0),
  math.max(redis.call('LLEN', ready) + redis.call('ZCARD', KEYS[9])
    - tonumber(redis.call('HGET', counts, topic .. ':stale') or 0), 0)
    + redis.call('ZCARD', gk.parked),
  tonumber(redis.call('HGET', counts, topic .. ':inflight') or 0),
  redis.call('ZCARD', dead),
  redis.call('HLEN', KEYS[8]),
  oldest,
  next_due,
  redis.call('SISMEMBER', paused, topic),
  fmt(now_us()),
  tonumber(redis.call('HGET', gk.prefix .. 'limits', topic .. ':group_concurrency') or -1),
}
local busiest = redis.call('ZRANGE', gk.waiting, 0, 9, 'REV', 'WITHSCORES')
for i = 1, #busiest, 2 do
  out[#out + 1] = busiest[i]
  out[#out + 1] = tonumber(busiest[i + 1])
  out[#out + 1] = tonumber(redis.call('HGET', gk.held, busiest[i]) or 0)
end
return out

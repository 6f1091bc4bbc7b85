-- list: one page of the jobs of a topic in a state (read-only), bounded per call.
-- KEYS[1] jobs  KEYS[2] the state's key: ready:<topic> (LIST), delayed or inflight (ZSET, all
--   topics of the shard, so they are filtered by topic, looking at most 1000 entries per call)
--   KEYS[3] gen:<topic> and KEYS[4] ranked:<topic> (ready only: the jobs are listed in fetch
--   order, lib.lua's ready lanes, and stale entries are skipped)
-- Ready jobs waiting for a slot of their group (lib.lua's groups: `parked:<topic>`, in push
--   order) come after the lanes' ones.
-- Delayed jobs (ARGV[1] 'delayed', KEYS[2] delayed): the far jobs (lib.lua) follow the delayed
--   set's, from the cursor FAR_CURSOR on.
-- ARGV[5] 'far' where far jobs may be.
-- ARGV[1] 'list' | 'zset' | 'delayed'  ARGV[2] topic  ARGV[3] cursor (position to start at)  ARGV[4] page size
-- Returns {next_cursor or -1, member_1, score_1, envelope_1, ...}; score is -1 for ready jobs.
local jobs, key = KEYS[1], KEYS[2]
local kind, topic, cursor, size = ARGV[1], ARGV[2], tonumber(ARGV[3]), math.min(tonumber(ARGV[4]), 1000)
local out = {-1}
if kind == 'list' then
  local lanes = redis.call('LLEN', key) + redis.call('ZCARD', KEYS[4])
  local entries = cursor < lanes and lane_range(key, KEYS[4], cursor, cursor + size - 1) or {}
  local live = #entries > 0 and live_entries(KEYS[3], entries) or {}
  local ids, seen = {}, #entries
  for i, id in ipairs(live) do ids[i] = id end
  local stop = cursor + size - 1
  if stop >= lanes then
    local parked = string.sub(jobs, 1, -5) .. 'parked:' .. topic
    need({parked}) -- declared on a cluster (lib.lua)
    for _, id in ipairs(redis.call('ZRANGE', parked, math.max(cursor - lanes, 0), stop - lanes)) do
      ids[#ids + 1] = id
      seen = seen + 1
    end
  end
  for _, id in ipairs(ids) do
    local member = topic .. ':' .. id
    out[#out + 1] = member
    out[#out + 1] = '-1'
    out[#out + 1] = redis.call('HGET', jobs, member) or ''
  end
  if seen == size then out[1] = cursor + size end
  return out
end
local far_on = ARGV[5] == 'far'
if kind == 'delayed' and far_on and cursor >= FAR_CURSOR then
  -- The far jobs (lib.lua): the topic's parts in the order of their earliest due time, each in
  -- push order, blank elements skipped; at most 100 parts and 1000 elements looked at.
  local at = cursor - FAR_CURSOR
  local rank, offset = math.floor(at / 1024), at % 1024
  local prefix = string.sub(jobs, 1, -5)
  need({prefix .. 'far'}) -- declared on a cluster (lib.lua)
  local parts = redis.call('ZRANGE', prefix .. 'far', rank, rank + 99)
  if CLUSTER then
    -- The topic's parts it may read, named from `far`: all in one stop (lib.lua's `need`).
    local names = {}
    for _, name in ipairs(parts) do
      if string.match(name, '^%w+:%d+:(.*)$') == topic then names[#names + 1] = prefix .. 'far:' .. name end
    end
    need(names)
  end
  local found, examined = 0, 0
  for x, name in ipairs(parts) do
    local b, t = string.match(name, '^(%w+):%d+:(.*)$')
    if t == topic then
      local elements = redis.call('LRANGE', prefix .. 'far:' .. name, offset, offset + 999 - examined)
      for k, element in ipairs(elements) do
        local id, raw, due = far_job(element, tonumber(b, 36))
        if id then
          out[#out + 1] = topic .. ':' .. id
          out[#out + 1] = fmt(due)
          out[#out + 1] = raw
          found = found + 1
          if found == size then
            out[1] = FAR_CURSOR + (rank + x - 1) * 1024 + offset + k
            return out
          end
        end
      end
      examined = examined + #elements
      if examined >= 1000 then
        out[1] = FAR_CURSOR + (rank + x - 1) * 1024 + offset + #elements
        return out
      end
    end
    offset = 0
  end
  if #parts == 100 then out[1] = FAR_CURSOR + (rank + 100) * 1024 end
  return out
end
local window = redis.call('ZRANGE', key, cursor, cursor + 999, 'WITHSCORES')
local prefix = topic .. ':'
local found, examined = 0, 0
for i = 1, #window, 2 do
  examined = examined + 1
  local member = window[i]
  if string.sub(member, 1, #prefix) == prefix then
    out[#out + 1] = member
    out[#out + 1] = window[i + 1]
    out[#out + 1] = redis.call('HGET', jobs, member) or ''
    found = found + 1
    if found == size then break end
  end
end
if found == size or #window == 2000 then
  out[1] = cursor + examined
elseif kind == 'delayed' and far_on and cursor < FAR_CURSOR then
  out[1] = FAR_CURSOR -- then the far jobs
end
return out

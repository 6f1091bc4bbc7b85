-- list: one page of the jobs of a topic in a state (read-only), bounded per call.
-- KEYS[1] jobs  KEYS[2] the state's key: ready:<topic> (LIST), delayed or inflight (ZSET, all
--   topics of the shard, so they are filtered by topic, looking at most 1000 entries per call)
--   KEYS[3] gen:<topic> and KEYS[4] ranked:<topic> (ready only: the jobs are listed in fetch
--   order, lib.lua's ready lanes, and stale entries are skipped)
-- ARGV[1] 'list' | 'zset'  ARGV[2] topic  ARGV[3] cursor (position to start at)  ARGV[4] page size
-- Returns {next_cursor or -1, member_1, score_1, envelope_1, ...}; score is -1 for ready jobs.
local jobs, key = KEYS[1], KEYS[2]
local kind, topic, cursor, size = ARGV[1], ARGV[2], tonumber(ARGV[3]), math.min(tonumber(ARGV[4]), 1000)
local out = {-1}
if kind == 'list' then
  local entries = lane_range(key, KEYS[4], cursor, cursor + size - 1)
  local ids = #entries > 0 and live_entries(KEYS[3], entries) or {}
  for _, id in ipairs(ids) do
    local member = topic .. ':' .. id
    out[#out + 1] = member
    out[#out + 1] = '-1'
    out[#out + 1] = redis.call('HGET', jobs, member) or ''
  end
  if #entries == size then out[1] = cursor + size end
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
if found == size or #window == 2000 then out[1] = cursor + examined end
return out

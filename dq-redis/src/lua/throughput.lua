-- throughput: a topic's runs that ended done or failed in each of the last 60 minutes of this
-- shard (read-only, O(60): the ring that tally() in lib.lua keeps in the counts hash).
-- KEYS[1] counts
-- ARGV[1] topic
-- Returns {now_minute, minute_1, done_1, failed_1, ...} for the slots that count a minute of the
-- last hour (slots not written for an hour or more are left out).
local counts, topic = KEYS[1], ARGV[1]
local now_minute = math.floor(now_us() / 60000000)
local fields = {}
for slot = 0, 59 do
  fields[#fields + 1] = topic .. ':minute@' .. slot
  fields[#fields + 1] = topic .. ':done@' .. slot
  fields[#fields + 1] = topic .. ':failed@' .. slot
end
local values = redis.call('HMGET', counts, unpack(fields))
local out = { fmt(now_minute) }
for i = 1, #values, 3 do
  local minute = tonumber(values[i])
  if minute and minute > now_minute - 60 and minute <= now_minute then
    out[#out + 1] = fmt(minute)
    out[#out + 1] = tonumber(values[i + 1]) or 0
    out[#out + 1] = tonumber(values[i + 2]) or 0
  end
end
return out

-- dead_list: one page of a topic's dead letters in one shard, newest first (read-only).
-- KEYS[1] jobs  KEYS[2] dead:<topic>
-- ARGV[1] rank to start at  ARGV[2] page size (at most 1000)
-- Returns {member_1, died_at_us_1, envelope_1, ...}.
local jobs, dead = KEYS[1], KEYS[2]
local offset, size = tonumber(ARGV[1]), math.min(tonumber(ARGV[2]), 1000)
local page = redis.call('ZREVRANGE', dead, offset, offset + size - 1, 'WITHSCORES')
local out = {}
for i = 1, #page, 2 do
  out[#out + 1] = page[i]
  out[#out + 1] = page[i + 1]
  out[#out + 1] = redis.call('HGET', jobs, page[i]) or ''
end
return out

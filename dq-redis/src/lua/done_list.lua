-- done_list: one page of a topic's kept succeeded jobs in one shard, newest first (read-only).
-- KEYS[1] jobs (a kept job's envelope stays there)  KEYS[2] done:<topic>  KEYS[3] results
-- ARGV[1] rank to start at  ARGV[2] page size (at most 1000)
-- Returns {member_1, succeeded_at_us_1, envelope_1, value_1, ...} (value '' for none).
local jobs, done, results = KEYS[1], KEYS[2], KEYS[3]
local offset, size = tonumber(ARGV[1]), math.min(tonumber(ARGV[2]), 1000)
local page = redis.call('ZREVRANGE', done, offset, offset + size - 1, 'WITHSCORES')
local out = {}
for i = 1, #page, 2 do
  out[#out + 1] = page[i]
  out[#out + 1] = page[i + 1]
  out[#out + 1] = redis.call('HGET', jobs, page[i]) or ''
  out[#out + 1] = redis.call('HGET', results, page[i]) or ''
end
return out

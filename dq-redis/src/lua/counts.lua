-- counts: how many jobs of one topic are in each state (read-only, O(1): the scripts keep the
-- delayed and running counts in a hash; stats.lua adds the slower lag and next-due lookups).
-- KEYS[1] counts  KEYS[2] ready:<topic>  KEYS[3] dead:<topic>  KEYS[4] done:<topic>
-- KEYS[5] ranked:<topic> (the ready jobs with a priority: lib.lua's ready lanes)
-- ARGV[1] topic
-- Ready counts the jobs waiting for a slot of their group too (lib.lua's groups: `parked:<topic>`,
-- named from the counts key's prefix).
-- Returns {delayed, ready, running, dead, done} (done: the records of succeeded jobs kept).
local counts, ready, dead, done = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local topic = ARGV[1]
-- Stale entries (lib.lua) are in the lanes but are no jobs.
local stale = tonumber(redis.call('HGET', counts, topic .. ':stale') or 0)
local parked = string.sub(counts, 1, -7) .. 'parked:' .. topic
need({parked}) -- declared on a cluster (lib.lua)
return {
  tonumber(redis.call('HGET', counts, topic .. ':delayed') or 0),
  math.max(redis.call('LLEN', ready) + redis.call('ZCARD', KEYS[5]) - stale, 0)
    + redis.call('ZCARD', parked),
  tonumber(redis.call('HGET', counts, topic .. ':inflight') or 0),
  redis.call('ZCARD', dead),
  redis.call('HLEN', done),
}

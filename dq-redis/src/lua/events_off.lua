-- events_off: turns a topic's job events off in a shard: its stream goes, and the number of its
-- last event is kept (`<topic>:n` in `events`) for the numbering to go on from it should the
-- events be turned on again (lib.lua's events_open): a reader resuming from a cursor taken
-- before then misses nothing and is not held back behind numbers it has seen.
-- KEYS[1] events  KEYS[2] events:<topic>
-- ARGV[1] topic
-- Returns 1.
local events, stream, topic = KEYS[1], KEYS[2], ARGV[1]
redis.call('EXISTS', events) -- touched before the first write
local last = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)[1]
-- The number first: the HDEL may delete the hash (a key is not written after that, lib.lua).
if last and last[2][1] == 'n' then redis.call('HSET', events, topic .. ':n', last[2][2]) end
redis.call('HDEL', events, topic)
redis.call('DEL', stream)
return 1

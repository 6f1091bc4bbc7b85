-- hold: holds back every start of a topic's jobs in this shard for a while (a handler's
-- Outcome::RateLimited: the provider answered "429, retry after"): fetch.lua leases none of
-- them before `<topic>:hold`, which moves to the hold's end unless it is later already.
-- Allowed when Redis is full: it stops work, it adds none.
-- KEYS[1] limits
-- ARGV[1] topic  ARGV[2] how long (us)
-- Returns the hold's end (us of this shard's clock).
local field = ARGV[1] .. ':hold'
local hold_end = math.max(tonumber(redis.call('HGET', KEYS[1], field) or '') or 0, now_us() + tonumber(ARGV[2]))
proceed_when_full(KEYS[1])
redis.call('HSET', KEYS[1], field, fmt(hold_end))
return fmt(hold_end)

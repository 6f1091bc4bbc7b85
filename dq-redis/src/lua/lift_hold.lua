-- lift_hold: ends a topic's hold in this shard now (an operator's `dq rate TOPIC --lift-hold`):
-- the field goes, and when a hold was in force the consumers waiting it out are told, as at a
-- resume, so that they look again at once.
-- KEYS[1] limits
-- ARGV[1] topic  ARGV[2] the shard's wake channel  ARGV[3] the resume message
-- Returns 1 when a hold was in force, else 0.
local field = ARGV[1] .. ':hold'
local hold_end = tonumber(redis.call('HGET', KEYS[1], field) or '')
if not hold_end then return 0 end
redis.call('HDEL', KEYS[1], field)
if hold_end <= now_us() then return 0 end
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1

-- progress: records the progress a running job reported (JSON), replacing the one before, while
-- the caller holds its lease (the token in `leases`, as extend.lua checks it). status.lua reads
-- it; the scripts that end a lease (ack, retry, dead, release, reclaim) delete it.
-- KEYS[1] leases  KEYS[2] progress
-- ARGV[1] member  ARGV[2] token  ARGV[3] the value (at most 64 KiB: the caller checks)
-- Returns 1, or 0 when the caller's lease is no longer held (nothing written).
-- One read, then one write: not allowed when Redis is full (progress adds memory, and a run's
-- progress is not what keeps jobs moving).
local leases, progress = KEYS[1], KEYS[2]
local member, token = ARGV[1], ARGV[2]
if redis.call('HGET', leases, member) ~= token then return 0 end
redis.call('HSET', progress, member, ARGV[3])
return 1

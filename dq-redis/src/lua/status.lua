-- status: one job's state and envelope (read-only).
-- KEYS[1] jobs  KEYS[2] delayed  KEYS[3] inflight  KEYS[4] dead:<topic>
-- ARGV[1] member
-- Returns {} when unknown, else {state, envelope, score_us}; state is delayed, ready, running or
-- dead; the score is the due time, the lease deadline or the time of death (-1 when ready).
local jobs, delayed, inflight, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local member = ARGV[1]
local raw = redis.call('HGET', jobs, member)
if not raw then return {} end
local score = redis.call('ZSCORE', delayed, member)
if score then return {'delayed', raw, score} end
score = redis.call('ZSCORE', inflight, member)
if score then return {'running', raw, score} end
score = redis.call('ZSCORE', dead, member)
if score then return {'dead', raw, score} end
return {'ready', raw, '-1'}

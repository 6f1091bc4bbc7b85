-- status: one job's state and envelope (read-only).
-- KEYS[1] jobs  KEYS[2] delayed  KEYS[3] inflight  KEYS[4] dead:<topic>  KEYS[5] done:<topic>
-- KEYS[6] progress  KEYS[7] cancels  KEYS[8] leases (a running job whose cancel was asked
-- against its lease: its worker was asked to stop it)
-- A kept succeeded job's envelope stays in `jobs`, as a dead letter's does; `done:<topic>`
-- holds its time and value (lib.lua).
-- A far job (lib.lua) is found through its index: delayed, its envelope rebuilt.
-- ARGV[1] member  ARGV[2] 'far' where far jobs may be
-- Returns {} when unknown, else {state, envelope, score_us[, value[, progress, asked]]}; state is
-- delayed, ready, running, dead, done or blocked (a workflow step waiting for the steps it comes
-- after: its envelope from its workflow, lib.lua); the score is the due time, the lease deadline, the time
-- of death or when it succeeded (-1 when ready); a done job's value is '' when its handler
-- returned none; a running job's reply is {'running', envelope, deadline, '', progress, asked},
-- its progress '' when it reported none, asked '1' when its cancel was asked (cancel.lua) and its
-- run has not ended, else '0'.
local jobs, delayed, inflight, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local member = ARGV[1]
local raw = redis.call('HGET', jobs, member)
if not raw then
  local prefix = string.sub(jobs, 1, -5)
  -- A far job (lib.lua), delayed.
  local far = ARGV[2] == 'far' and far_where(prefix, member, topic_of(member) or '')
  if far then
    local envelope, due = far_read(far)
    if envelope then return {'delayed', envelope, fmt(due)} end
  end
  -- A blocked workflow step: its envelope waits in its workflow (lib.lua's workflows).
  local ref = redis.call('HGET', prefix .. 'workflows', member)
  local colon = ref and string.find(ref, ':', 1, true)
  if not colon then return {} end
  local step = string.sub(ref, colon + 1)
  local flow = prefix .. 'workflow:' .. string.sub(ref, 1, colon - 1)
  need({flow}) -- declared on a cluster (lib.lua)
  local got = redis.call('HMGET', flow, 's:' .. step, 'j:' .. step)
  if got[1] == 'b' and got[2] then return {'blocked', got[2], '-1'} end
  return {}
end
local score = redis.call('ZSCORE', delayed, member)
if score then return {'delayed', raw, score} end
score = redis.call('ZSCORE', inflight, member)
if score then
  local asked = redis.call('HGET', KEYS[7], member)
  asked = asked and asked == redis.call('HGET', KEYS[8], member) and '1' or '0'
  return {'running', raw, score, '', redis.call('HGET', KEYS[6], member) or '', asked}
end
score = redis.call('ZSCORE', dead, member)
if score then return {'dead', raw, score} end
local rec = redis.call('HGET', KEYS[5], member)
if rec then
  local at, value = record_parts(rec)
  return {'done', raw, at, value}
end
return {'ready', raw, '-1'}

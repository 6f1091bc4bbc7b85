-- push: creates jobs, or leaves (or replaces) the ones whose id is already pending.
-- KEYS[1] jobs  KEYS[2] delayed  KEYS[3] topics  KEYS[4] counts
-- ARGV[1] key prefix  ARGV[2] 'keep' | 'replace'  ARGV[3] n (jobs in this call, at most 1000)
-- then 5 values per job: topic, id, when ('+<us>' after now, or '<us>' since the epoch),
--   max_attempts, payload
-- Returns {earliest_due_if_it_moved_earlier_or_-1, code_1, ..., code_n}; codes:
--   0 kept (already pending), 1 created, 2 replaced, 3 running (replace refused: it is running)
local jobs, delayed, topics, counts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, replace, n = ARGV[1], ARGV[2] == 'replace', tonumber(ARGV[3])
local now = now_us()
local before = earliest(delayed)
local out = {0}
local seen_topics = {}
for i = 0, n - 1 do
  local topic, id, when, max, payload = ARGV[4 + i * 5], ARGV[5 + i * 5], ARGV[6 + i * 5],
    tonumber(ARGV[7 + i * 5]), ARGV[8 + i * 5]
  local member = topic .. ':' .. id
  local code = 1
  local existing = redis.call('HGET', jobs, member)
  if existing then
    if redis.call('ZSCORE', prefix .. 'dead:' .. topic, member) then
      redis.call('ZREM', prefix .. 'dead:' .. topic, member)
    elseif redis.call('ZSCORE', prefix .. 'inflight', member) then
      code = replace and 3 or 0
    elseif not replace then
      code = 0
    else
      code = 2
      if redis.call('ZREM', delayed, member) == 1 then
        bump(counts, topic, 'delayed', -1)
      else
        redis.call('LREM', prefix .. 'ready:' .. topic, 1, id)
      end
    end
  end
  if code == 1 or code == 2 then
    local due = due_from(when, now)
    local lease = 0
    local old = parse(existing)
    if old then lease = old.lease end
    redis.call('HSET', jobs, member, encode({ attempt = 0, max = max, lease = lease, created = now, due = due,
      err = '', payload = payload }))
    place(prefix, delayed, counts, member, topic, id, due, now)
    if not seen_topics[topic] then
      seen_topics[topic] = true
      redis.call('SADD', topics, topic)
    end
  end
  out[#out + 1] = code
end
out[1] = announce(prefix, delayed, before)
return out

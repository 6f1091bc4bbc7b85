-- promote: moves due jobs from the delayed set to their topics' ready lists, a bounded batch.
-- KEYS[1] delayed  KEYS[2] counts
-- ARGV[1] key prefix  ARGV[2] most jobs to move (at most 10000)
-- Returns {moved, next_due_us or -1, now_us, topic_1, count_1, topic_2, count_2, ...}
-- Every key is read (touched) before the first write, and none is read after a write that may
-- have deleted it: on a cluster whose slot is migrating, a key missing here aborts the script
-- where it stands, and Redis keeps what it already wrote (DESIGN.md).
local delayed, counts = KEYS[1], KEYS[2]
local prefix, limit = ARGV[1], tonumber(ARGV[2])
local now = now_us()
local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
local out = {#due, -1, fmt(now)}
-- The next due time once these are gone: the entry ranked right after them.
local after = redis.call('ZRANGE', delayed, #due, #due, 'WITHSCORES')
if after[2] then out[2] = fmt(tonumber(after[2])) end
if #due == 0 then return out end
local by_topic, order = {}, {}
for _, member in ipairs(due) do
  local colon = string.find(member, ':', 1, true)
  if colon then
    local topic, id = string.sub(member, 1, colon - 1), string.sub(member, colon + 1)
    if not by_topic[topic] then
      by_topic[topic] = {}
      order[#order + 1] = topic
      redis.call('LLEN', prefix .. 'ready:' .. topic) -- touch before any write
    end
    local list = by_topic[topic]
    list[#list + 1] = id
  end
end
for _, topic in ipairs(order) do
  push_all('RPUSH', prefix .. 'ready:' .. topic, by_topic[topic])
  ring(prefix, topic)
  bump(counts, topic, 'delayed', -#by_topic[topic])
  out[#out + 1] = topic
  out[#out + 1] = #by_topic[topic]
end
-- Last: this may empty (delete) the delayed set. The due members are exactly the lowest-ranked
-- ones, so they go by rank in one call.
redis.call('ZREMRANGEBYRANK', delayed, 0, #due - 1)
return out

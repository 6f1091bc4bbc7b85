-- rate_grant: counts starts of a topic against its rate for a fetch in another shard of the
-- namespace (a rate over several shards is counted here, in the namespace's first shard, for
-- all of them: fetch.lua of another shard leases no job of the topic without a grant). GCRA
-- as fetch.lua's (lib.lua's gcra_take), with the whole rate: up to ARGV[2] starts now, the
-- topic's theoretical arrival time moved on by one interval each; the caller gives back what
-- its fetch did not
-- start (ARGV[2] '-': a give-back of ARGV[3] starts granted when the time was ARGV[4], applied
-- only while no later grant or fetch moved it, so that what it lets out again was never let
-- out: else they are lost to the rate, never added to it).
-- Allowed when Redis is full: it moves a count, it adds nothing.
-- KEYS[1] limits (of the namespace's first shard): `<topic>:tat` the topic's time, and
-- `<topic>:tat_by` the name of the grant that wrote it last (none after a give-back)
-- ARGV[1] topic  ARGV[2] most starts wanted, or '-'  ARGV[3] starts given back  ARGV[4] the
-- grant's name (unique among processes), or for a give-back the time it was granted at
-- ARGV[5] (a give-back) the grant's name
-- Returns {granted, tat, wait_us}: granted -1 when the topic has no rate here (its rate was
-- just lifted: the caller fetches as without one); tat the time written ('' when none was);
-- wait_us how long until the next start when fewer than wanted were granted (0 otherwise).
-- A give-back returns {1, '', 0} when it was applied, {0, '', 0} when a later start had moved
-- the time on (dropped: metric `late`), {-1, '', 0} without a rate.
local field, tat_field, by_field = ARGV[1] .. ':rate', ARGV[1] .. ':tat', ARGV[1] .. ':tat_by'
local limit = redis.call('HMGET', KEYS[1], field, tat_field, by_field)
local i, t = string.match(limit[1] or '', '^([^:]+):([^:]+):')
local interval, tolerance = tonumber(i), tonumber(t)
if not interval then return {-1, '', 0} end
if ARGV[2] == '-' then
  -- The time alone is not unique (a give-back and an equal grant may bring it back to the same
  -- value): the grant that wrote it is named beside it, and a give-back applied clears the name,
  -- so that one delivered twice applies once.
  if limit[2] == ARGV[4] and limit[3] == ARGV[5] then
    proceed_when_full(KEYS[1])
    redis.call('HSET', KEYS[1], tat_field, string.format('%.3f', tonumber(ARGV[4]) - tonumber(ARGV[3]) * interval))
    redis.call('HDEL', KEYS[1], by_field)
    return {1, '', 0}
  end
  return {0, '', 0}
end
local n, wait, base = gcra_take(tonumber(limit[2] or ''), now_us(), interval, tolerance,
  tonumber(ARGV[2]))
if n <= 0 then return {0, '', fmt(math.ceil(wait))} end
local tat = string.format('%.3f', base + n * interval)
proceed_when_full(KEYS[1])
redis.call('HSET', KEYS[1], tat_field, tat, by_field, ARGV[4])
return {n, tat, fmt(math.ceil(wait))}

-- Times, with TIME inside one script, per job of 1,000 distinct groups (ARGV[1]: the first
-- group's number less 1): one RPUSH and one LPOP on each group's list; the same park and
-- let-in on the packed hash (one HMGET and one HSET for all, the line appended to or cut in
-- Lua); and, for scale, one HMGET of 1,000 envelopes. Returns the five figures in us per job.
local function t() local x = redis.call('TIME'); return tonumber(x[1]) * 1e6 + tonumber(x[2]) end
local base = tonumber(ARGV[1])
local n = 1000
local out = {}
-- lists: one RPUSH a group, then one LPOP a group
local a = t()
for i = 1, n do redis.call('RPUSH', 'gq:t:g' .. (base + i), 'new' .. i) end
local b = t()
for i = 1, n do redis.call('LPOP', 'gq:t:g' .. (base + i), 1) end
local c = t()
-- packed: one HMGET and one HSET for all, appending
local f = {}
for i = 1, n do f[i] = 'g' .. (base + i) end
local d = t()
local v = redis.call('HMGET', 'gline:t', unpack(f))
local args = {}
for i = 1, n do args[#args + 1] = f[i]; args[#args + 1] = (v[i] and (v[i] .. ',') or '') .. 'new' .. i end
redis.call('HSET', 'gline:t', unpack(args))
local e = t()
-- packed pop: HMGET, cut the head, HSET
v = redis.call('HMGET', 'gline:t', unpack(f))
args = {}
local heads = {}
for i = 1, n do
  local s = v[i]
  local comma = string.find(s, ',', 1, true)
  heads[i] = comma and string.sub(s, 1, comma - 1) or s
  args[#args + 1] = f[i]; args[#args + 1] = comma and string.sub(s, comma + 1) or ''
end
redis.call('HSET', 'gline:t', unpack(args))
local g = t()
-- reference: HMGET of 1000 envelopes
local m = {}
for i = 1, n do m[i] = 't:j' .. (base * 3 + i) end
local h = t()
redis.call('HMGET', 'jobs', unpack(m))
local k = t()
return {tostring((b - a) / n), tostring((c - b) / n), tostring((e - d) / n), tostring((g - e) / n), tostring((k - h) / n)}

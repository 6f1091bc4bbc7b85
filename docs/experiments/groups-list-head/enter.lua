-- KEYS[1] ready; ARGV: prefix, then id, group pairs. Minimal "list head" groups, concurrency 1:
-- a job goes to its group's list; the list's first entry is the one holding the slot.
local prefix = ARGV[1]
local admit = {}
for i = 2, #ARGV, 2 do
  local id, g = ARGV[i], ARGV[i + 1]
  if redis.call('RPUSH', prefix .. 'gq:' .. g, id) == 1 then admit[#admit + 1] = id end
end
if #admit > 0 then redis.call('RPUSH', KEYS[1], unpack(admit)) end
return #admit

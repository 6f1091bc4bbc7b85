-- KEYS[1] ready; ARGV: prefix, then id, group pairs of acked jobs: each leaves its group's
-- head, and the next in its group goes in line.
local prefix = ARGV[1]
local admit = {}
for i = 2, #ARGV, 2 do
  local id, g = ARGV[i], ARGV[i + 1]
  local q = prefix .. 'gq:' .. g
  local head = redis.call('LPOP', q)
  if head ~= id then
    if head then redis.call('LPUSH', q, head) end
    redis.call('LREM', q, 1, id)
  end
  local nxt = redis.call('LINDEX', q, 0)
  if nxt then admit[#admit + 1] = nxt end
end
if #admit > 0 then redis.call('RPUSH', KEYS[1], unpack(admit)) end
return #admit

-- the ids' strings and SHA-1 alone (no lookup): what any lookup pays before its command
local n, base = tonumber(ARGV[1]), ARGV[2]
local x = 0
for i = 1, n do
  local m = 'bench-0:' .. base .. i
  x = x + #redis.sha1hex(m)
end
return x

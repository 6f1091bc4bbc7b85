-- fills 32768 index hashes with ARGV[1] entries each (as far_index would spread them)
local per = tonumber(ARGV[1])
local from, to = tonumber(ARGV[2]), tonumber(ARGV[3])
for h = from, to do
  local args = {}
  for i = 1, per do
    args[#args + 1] = 'bench-0:f' .. h .. '-' .. i
    args[#args + 1] = '3kavn:' .. (i % 50) .. ':' .. string.format('%x', i % 1000)
  end
  redis.call('HSET', 'dq:{b:0}:fx:' .. h, unpack(args))
end
return 1

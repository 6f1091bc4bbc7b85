-- baseline: ungrouped promotion (ids to ready)
local ids = {}
for i = 2, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
redis.call('RPUSH', KEYS[1], unpack(ids))
return #ids

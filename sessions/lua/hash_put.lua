-- Write fields of a hash and (re)set its time to live. KEYS: 1 hash
-- ARGV: 1 ttl ms, 2.. field, value pairs
local fv = {}
for i = 2, #ARGV do fv[#fv + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fv))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1

-- Record fields of the in-flight turn (card handle, session, checkpoint), only while holding the lease.
-- KEYS: 1 lease, 2 turn   ARGV: 1 owner, 2.. field, value pairs
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
local fv = {}
for i = 2, #ARGV do fv[#fv + 1] = ARGV[i] end
redis.call('HSET', KEYS[2], unpack(fv))
return 1

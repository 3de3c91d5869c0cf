-- The owner of a running turn takes the first n items of the burst (after handing them to the
-- running agent: steer), only while it still holds the lease.
-- KEYS: 1 lease, 2 burst, 3 burstmeta   ARGV: 1 owner, 2 n
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('LTRIM', KEYS[2], tonumber(ARGV[2]), -1)
if redis.call('LLEN', KEYS[2]) == 0 then redis.call('DEL', KEYS[3]) end
return 1

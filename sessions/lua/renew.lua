-- Renew a run lease while its owner still holds it, and keep the due index pointing past it.
-- KEYS: 1 lease, 2 due index, 3 cancel flag
-- ARGV: 1 owner, 2 lease ms, 3 conversation, 4 now ms
-- Returns {held, cancel}: held 0 means the lease was lost (another replica may take the turn).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0, ''} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], tonumber(ARGV[4]) + tonumber(ARGV[2]), ARGV[3])
return {1, redis.call('GET', KEYS[3]) or ''}

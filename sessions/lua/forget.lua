-- Remove the n-th (1-based) item of a list atomically; returns the removed item or false.
-- KEYS: 1 list   ARGV: 1 n
local n = tonumber(ARGV[1])
local value = redis.call('LINDEX', KEYS[1], n - 1)
if not value then return false end
redis.call('LSET', KEYS[1], n - 1, '\0deleted')
redis.call('LREM', KEYS[1], 1, '\0deleted')
return value

-- The owner of a running turn takes the first n items of the burst (after handing them to the
-- running agent: steer), only while it still holds the lease; the burst's count and bytes in
-- burstmeta (intake.lua) go down by what it took, and the chat may be told of a full burst again.
-- KEYS: 1 lease, 2 burst, 3 burstmeta   ARGV: 1 owner, 2 n
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local n = tonumber(ARGV[2])
local bytes = 0
if n > 0 then
  for _, item in ipairs(redis.call('LRANGE', KEYS[2], 0, n - 1)) do
    bytes = bytes + string.len(item)
  end
end
redis.call('LTRIM', KEYS[2], n, -1)
local left = redis.call('LLEN', KEYS[2])
if left == 0 then
  redis.call('DEL', KEYS[3])
elseif redis.call('EXISTS', KEYS[3]) == 1 then
  local held = tonumber(redis.call('HGET', KEYS[3], 'bytes') or '0') - bytes
  redis.call('HSET', KEYS[3], 'n', left, 'bytes', held > 0 and held or 0)
  redis.call('HDEL', KEYS[3], 'told')
end
return 1

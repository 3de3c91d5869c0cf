-- Set fields of the current session only if it is still the given session (no resurrecting an
-- ended one). KEYS: 1 binding  ARGV: 1 session id, 2.. field, value pairs ('' value deletes)
if redis.call('HGET', KEYS[1], 'sessionId') ~= ARGV[1] then return 0 end
for i = 2, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[1], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 1

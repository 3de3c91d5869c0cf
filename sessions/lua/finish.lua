-- Finish (or hand back) a turn. finish drops the turn; handback keeps it for another replica now.
-- KEYS: 1 lease, 2 due index, 3 turn, 4 burst, 5 burstmeta, 6 cancel flag, 7 binding
-- ARGV: 1 owner, 2 conversation, 3 now ms, 4 mode: finish | handback,
--       5 session id ('' for none), 6 binding ttl ms
-- finish also marks the session active now (idle time counts from the end of the turn).
-- Returns {'lost'} | {'idle'} | {'more', due} | {'handedback'}
local now = tonumber(ARGV[3])
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {'lost'} end
redis.call('DEL', KEYS[1])
if ARGV[4] == 'handback' then
  redis.call('HINCRBY', KEYS[3], 'attempts', -1)
  redis.call('ZADD', KEYS[2], now, ARGV[2])
  return {'handedback'}
end
redis.call('DEL', KEYS[3], KEYS[6])
if ARGV[5] ~= '' and redis.call('HGET', KEYS[7], 'sessionId') == ARGV[5] then
  redis.call('HSET', KEYS[7], 'lastActiveAt', now)
  redis.call('PEXPIRE', KEYS[7], ARGV[6])
end
if redis.call('LLEN', KEYS[4]) > 0 then
  local meta = redis.call('HMGET', KEYS[5], 'first', 'last', 'window', 'max', 'urgent')
  local due = now
  if meta[5] ~= '1' and meta[1] then
    due = math.min(tonumber(meta[2]) + tonumber(meta[3]), tonumber(meta[1]) + tonumber(meta[4]))
  end
  if due < now then due = now end
  redis.call('ZADD', KEYS[2], due, ARGV[2])
  return {'more', due}
end
redis.call('ZREM', KEYS[2], ARGV[2])
return {'idle'}

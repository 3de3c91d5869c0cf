-- Claim a due conversation: take the lease and either resume its in-flight turn or turn the due
-- part of its burst into a new turn (DESIGN.md §8.3, §8.5).
-- KEYS: 1 due index, 2 lease, 3 burst, 4 burstmeta, 5 turn
-- ARGV: 1 conversation, 2 now ms, 3 owner token, 4 lease ms, 5 new turn id, 6 turn ttl ms
-- Returns {'none'} | {'notdue', due} | {'busy'} | {'empty'} | {'resume', turnjson} | {'new', turnjson}
local member = ARGV[1]
local now = tonumber(ARGV[2])
local lease_ms = tonumber(ARGV[4])
local score = redis.call('ZSCORE', KEYS[1], member)
if not score then return {'none'} end
if tonumber(score) > now then return {'notdue', score} end
if redis.call('EXISTS', KEYS[2]) == 1 then
  local pttl = redis.call('PTTL', KEYS[2])
  if pttl < 0 then pttl = lease_ms end
  redis.call('ZADD', KEYS[1], now + pttl, member)
  return {'busy'}
end

local function turn_json()
  local flat = redis.call('HGETALL', KEYS[5])
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return cjson.encode(t)
end

if redis.call('EXISTS', KEYS[5]) == 1 then
  redis.call('HINCRBY', KEYS[5], 'attempts', 1)
  redis.call('SET', KEYS[2], ARGV[3], 'PX', lease_ms)
  redis.call('ZADD', KEYS[1], now + lease_ms, member)
  return {'resume', turn_json()}
end

local n = redis.call('LLEN', KEYS[3])
if n == 0 then
  redis.call('ZREM', KEYS[1], member)
  return {'empty'}
end
local meta = redis.call('HMGET', KEYS[4], 'first', 'last', 'window', 'max', 'urgent')
if meta[5] ~= '1' and meta[1] then
  local due = math.min(tonumber(meta[2]) + tonumber(meta[3]), tonumber(meta[1]) + tonumber(meta[4]))
  if due > now then
    redis.call('ZADD', KEYS[1], due, member)
    return {'notdue', due}
  end
end

-- A click (kind action) is a turn of its own; messages up to the next click merge into one turn.
local items = redis.call('LRANGE', KEYS[3], 0, -1)
local take = 0
for i = 1, #items do
  local kind = cjson.decode(items[i])['kind']
  if kind == 'action' then
    if i == 1 then take = 1 end
    break
  end
  take = i
end
local taken = {}
for i = 1, take do taken[i] = items[i] end
if take == n then
  redis.call('DEL', KEYS[3], KEYS[4])
else
  redis.call('LTRIM', KEYS[3], take, -1)
  redis.call('HSET', KEYS[4], 'first', now, 'last', now, 'urgent', 1)
end
redis.call('DEL', KEYS[5])
redis.call('HSET', KEYS[5], 'id', ARGV[5], 'items', '[' .. table.concat(taken, ',') .. ']',
  'attempts', 1, 'createdAt', now)
redis.call('PEXPIRE', KEYS[5], ARGV[6])
redis.call('SET', KEYS[2], ARGV[3], 'PX', lease_ms)
redis.call('ZADD', KEYS[1], now + lease_ms, member)
return {'new', turn_json()}

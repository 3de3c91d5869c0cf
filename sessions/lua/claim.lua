-- Claim a due conversation: take the lease and either resume its in-flight turn or turn the due
-- part of its burst into a new turn (docs/architecture.md, invariants 3 and 5).
-- A new turn of plain messages also continues the conversation's session when it has one that
-- is not idle past its timeout (what binding.lua does then), so the turn needs no second call;
-- a new session, a click, a trigger or a resumed turn is bound by binding.lua as before.
-- KEYS: 1 due index, 2 lease, 3 burst, 4 burstmeta, 5 turn, 6 binding (optional)
-- ARGV: 1 conversation, 2 now ms, 3 owner token, 4 lease ms, 5 new turn id, 6 turn ttl ms,
--       7 session idle timeout ms (0 or absent: bind nothing here), 8 binding ttl ms,
--       9 '1': split by sender (a turn takes the messages of one sender: the expert acts as
--         its sender, so two senders' messages never run as one's; issue 36)
-- Returns {'none'} | {'notdue', due} | {'busy'} | {'empty'} | {'resume', turnjson} |
--   {'new', turnjson} | {'new', turnjson, bindingjson} (the session continued)
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
-- Bounded work (issue 25): at most TAKE items are read (the rest wait for the next turn, due at
-- once), and an item's kind is read off its JSON text, not decoded: an Envelope's "kind" is its
-- fifth field, after four strings (in which a quote is always escaped), so the first
-- '"kind":"' is the envelope's own; an item without one is decoded.
-- Split by sender: the sender's id is read off the JSON text as well (the first unescaped
-- '"sender":{"id":"' is the envelope's own: a quote inside a string is always escaped), decoded
-- when the id holds an escape.
local TAKE = 1000
local split = ARGV[9] == '1'
local items = redis.call('LRANGE', KEYS[3], 0, TAKE - 1)
local take = 0
local taken_bytes = 0
local plain = true  -- every item taken is a message (no click, no trigger)
local first_sender = nil
local function sender_of(item)
  local id = string.match(item, '"sender":{"id":"([^"\\]*)"')
  if id == nil then id = cjson.decode(item)['sender']['id'] end
  return id
end
for i = 1, #items do
  local kind = string.match(items[i], '"kind":"(%a+)"')
  if kind == nil then kind = cjson.decode(items[i])['kind'] end
  if kind == 'action' then
    if i == 1 then take = 1; plain = false; taken_bytes = string.len(items[1]) end
    break
  end
  if split then
    local sender = sender_of(items[i])
    if i == 1 then first_sender = sender elseif sender ~= first_sender then break end
  end
  if kind ~= nil and kind ~= 'message' then plain = false end
  take = i
  taken_bytes = taken_bytes + string.len(items[i])
end
local taken = {}
for i = 1, take do taken[i] = items[i] end
if take == n then
  redis.call('DEL', KEYS[3], KEYS[4])
else
  redis.call('LTRIM', KEYS[3], take, -1)
  -- What is left is counted (a burst stored before the count gets it now) and may be told again.
  local left_bytes = tonumber(redis.call('HGET', KEYS[4], 'bytes') or '0') - taken_bytes
  if left_bytes < 0 then left_bytes = 0 end
  redis.call('HSET', KEYS[4], 'first', now, 'last', now, 'urgent', 1, 'n', n - take,
    'bytes', left_bytes)
  redis.call('HDEL', KEYS[4], 'told')
end
redis.call('DEL', KEYS[5])
redis.call('HSET', KEYS[5], 'id', ARGV[5], 'items', '[' .. table.concat(taken, ',') .. ']',
  'attempts', 1, 'createdAt', now)
redis.call('PEXPIRE', KEYS[5], ARGV[6])
redis.call('SET', KEYS[2], ARGV[3], 'PX', lease_ms)
redis.call('ZADD', KEYS[1], now + lease_ms, member)
local timeout = tonumber(ARGV[7] or '0') or 0
if plain and timeout > 0 and KEYS[6] then
  local b = redis.call('HMGET', KEYS[6], 'sessionId', 'lastActiveAt')
  if b[1] and b[2] and now - tonumber(b[2]) <= timeout then
    redis.call('HSET', KEYS[6], 'lastActiveAt', now, 'cardTurn', ARGV[5])
    redis.call('HINCRBY', KEYS[6], 'turns', 1)
    redis.call('PEXPIRE', KEYS[6], ARGV[8])
    redis.call('HSET', KEYS[5], 'session', b[1])
    local flat = redis.call('HGETALL', KEYS[6])
    local t = {}
    for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
    return {'new', turn_json(), cjson.encode(t)}
  end
end
return {'new', turn_json()}

-- Intake: dedup + append to the conversation's burst + schedule it, atomically (docs/architecture.md, invariants 1-2).
-- KEYS: 1 dedup, 2 burst, 3 burstmeta, 4 due index, 5 turn
-- ARGV: 1 envelope json, 2 now ms, 3 window ms, 4 max window ms, 5 dedup ttl ms,
--       6 burst ttl ms, 7 conversation (due member), 8 mode: collect | reject | urgent,
--       9 most messages the burst may hold, 10 most bytes (0: no cap; issue 25)
-- Returns {status, due_ms, busy, told}: status is dup | queued | busy (reject policy, not
-- stored) | full (over the cap: not stored, the dedup key keeps it refused; told is '1' for the
-- first refusal since the burst was last under its cap, when the chat is told, else '0').
-- The burst's size is kept in burstmeta (n, bytes), so no call reads the burst to know it.
local now = tonumber(ARGV[2])
if not redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[5]) then
  return {'dup', 0, 0, '0'}
end
local busy = redis.call('EXISTS', KEYS[5])
if ARGV[8] == 'reject' and busy == 1 then
  return {'busy', 0, 1, '0'}
end
local size = string.len(ARGV[1])
local held = redis.call('HMGET', KEYS[3], 'n', 'bytes', 'first', 'urgent')  -- one read of it
local count = tonumber(held[1])
if not count then count = redis.call('LLEN', KEYS[2]) end  -- a burst stored before the count
local bytes = tonumber(held[2]) or 0
local max_n, max_bytes = tonumber(ARGV[9] or '0') or 0, tonumber(ARGV[10] or '0') or 0
if (max_n > 0 and count >= max_n) or (max_bytes > 0 and bytes + size > max_bytes) then
  -- Refused, explicitly: the dedup key stays (a redelivery is a duplicate, told nothing more).
  -- Told once per full burst (the claim that takes from it clears 'told'); a message too big
  -- for an empty burst is told each time.
  if count == 0 then return {'full', 0, busy, '1'} end
  local told = redis.call('HSETNX', KEYS[3], 'told', 1)
  return {'full', 0, busy, tostring(told)}
end
redis.call('RPUSH', KEYS[2], ARGV[1])
local first = tonumber(held[3] or now)
local window = tonumber(ARGV[3])
local maxw = tonumber(ARGV[4])
redis.call('HSET', KEYS[3], 'first', first, 'last', now, 'window', window, 'max', maxw,
  'n', count + 1, 'bytes', bytes + size)
local due = math.min(now + window, first + maxw)
if ARGV[8] == 'urgent' then
  redis.call('HSET', KEYS[3], 'urgent', 1)
  due = now
elseif held[4] == '1' then
  due = now
end
-- Both keys expire long after any window; the TTL only reclaims a conversation nobody serves.
redis.call('PEXPIRE', KEYS[2], ARGV[6])
redis.call('PEXPIRE', KEYS[3], ARGV[6])
-- A busy conversation keeps its lease-expiry score; finishing the turn reschedules the burst.
if busy == 0 then
  redis.call('ZADD', KEYS[4], due, ARGV[7])
end
return {'queued', due, busy, '0'}

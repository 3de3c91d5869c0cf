-- Intake: dedup + append to the conversation's burst + schedule it, atomically (DESIGN.md §1, §8.1-2).
-- KEYS: 1 dedup, 2 burst, 3 burstmeta, 4 due index, 5 turn
-- ARGV: 1 envelope json, 2 now ms, 3 window ms, 4 max window ms, 5 dedup ttl ms,
--       6 burst ttl ms, 7 conversation (due member), 8 mode: collect | reject | urgent
-- Returns {status, due_ms, busy}: status is dup | queued | busy (reject policy, not stored)
local now = tonumber(ARGV[2])
if not redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[5]) then
  return {'dup', 0, 0}
end
local busy = redis.call('EXISTS', KEYS[5])
if ARGV[8] == 'reject' and busy == 1 then
  return {'busy', 0, 1}
end
redis.call('RPUSH', KEYS[2], ARGV[1])
local first = tonumber(redis.call('HGET', KEYS[3], 'first') or now)
local window = tonumber(ARGV[3])
local maxw = tonumber(ARGV[4])
redis.call('HSET', KEYS[3], 'first', first, 'last', now, 'window', window, 'max', maxw)
local due = math.min(now + window, first + maxw)
if ARGV[8] == 'urgent' then
  redis.call('HSET', KEYS[3], 'urgent', 1)
  due = now
elseif redis.call('HGET', KEYS[3], 'urgent') == '1' then
  due = now
end
-- Both keys expire long after any window; the TTL only reclaims a conversation nobody serves.
redis.call('PEXPIRE', KEYS[2], ARGV[6])
redis.call('PEXPIRE', KEYS[3], ARGV[6])
-- A busy conversation keeps its lease-expiry score; finishing the turn reschedules the burst.
if busy == 0 then
  redis.call('ZADD', KEYS[4], due, ARGV[7])
end
return {'queued', due, busy}

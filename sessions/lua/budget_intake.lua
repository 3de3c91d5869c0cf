-- Intake under a budget: dedup, the conversation's limits and intake.lua, in ONE step on one
-- slot. sessions/budgets.py puts intake.lua's text in place of the marker line below, so an
-- accepted message is stored exactly as intake.lua stores any message.
-- A message that opens a new burst (none is waiting: it starts a turn; later ones merge into
-- it) is checked against the limits and, once stored, counted; one that joins the open burst is
-- stored as always. Over a limit nothing is stored: the dedup key keeps the verdict, so a
-- redelivery gets the same answer (status 'again') rather than a second count.
-- KEYS: 1-5 as intake.lua (dedup, burst, burstmeta, due index, turn), 6 the conversation's turns
--       of the last hour (zset: event id -> start ms), 7 the sender's there, 8 today's tokens,
--       9 today's refusals (the day's counters expire an hour after it, by the caller's
--       clock), 10 the shard's usage index of the integration (zset: conversation -> last use)
-- ARGV: 1-10 as intake.lua, 11 event id, 12 the budget clock (ms), 13 turns per hour per chat,
--       14 per sender, 15 tokens per day (-1: no limit), 16 the end of today (ms), 17 how long
--       the usage index keeps a conversation (ms)
-- Returns {status, due_ms, busy, verdict}: status is dup | queued | busy | full | refused |
-- again; verdict (refused, again) is '<chat|sender|tokens>:<ms when the chat may ask again>',
-- (full) intake.lua's told
local function intake()
--INTAKE--
end

local HOUR = 3600000
local held = redis.call('GET', KEYS[1])
if held then
  if string.sub(held, 1, 8) == 'refused:' then return {'again', 0, 0, string.sub(held, 9)} end
  return {'dup', 0, 0, ''}
end
local now = tonumber(ARGV[12])
local busy = redis.call('EXISTS', KEYS[5]) == 1
if redis.call('HEXISTS', KEYS[3], 'first') == 1 or (ARGV[8] == 'reject' and busy) then
  local result = intake()  -- joins the burst that is waiting (one turn), or busy (reject)
  if result[1] ~= 'full' then result[4] = '' end
  return result
end

local function use()
  redis.call('ZADD', KEYS[10], now, ARGV[7])
  redis.call('ZREMRANGEBYSCORE', KEYS[10], '-inf', now - tonumber(ARGV[17]))
  redis.call('PEXPIRE', KEYS[10], ARGV[17])
end

redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now - HOUR)
redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now - HOUR)
local which, retry = nil, 0
local function over(name, at)
  if at > retry then which, retry = name, at end
end
for i, name in ipairs({'chat', 'sender'}) do
  local limit = tonumber(ARGV[12 + i])
  local count = redis.call('ZCARD', KEYS[5 + i])
  if limit > 0 and count >= limit then
    -- Free again when the oldest turn that keeps it at its limit leaves the window.
    local oldest = redis.call('ZRANGE', KEYS[5 + i], count - limit, count - limit, 'WITHSCORES')
    over(name, tonumber(oldest[2]) + HOUR)
  end
end
local tokens = tonumber(ARGV[15])
if tokens > 0 and tonumber(redis.call('GET', KEYS[8]) or '0') >= tokens then
  over('tokens', tonumber(ARGV[16]))
end
if which then
  local verdict = which .. ':' .. retry
  redis.call('SET', KEYS[1], 'refused:' .. verdict, 'PX', ARGV[5])
  redis.call('INCR', KEYS[9])
  redis.call('PEXPIRE', KEYS[9], tonumber(ARGV[16]) - now + HOUR)  -- the day, and an hour
  use()
  return {'refused', 0, 0, verdict}
end

local result = intake()
if result[1] == 'queued' then
  redis.call('ZADD', KEYS[6], now, ARGV[11])
  redis.call('PEXPIRE', KEYS[6], HOUR)
  redis.call('ZADD', KEYS[7], now, ARGV[11])
  redis.call('PEXPIRE', KEYS[7], HOUR)
  use()
end
if result[1] ~= 'full' then result[4] = '' end
return result

-- An app's platform budget, shared by every replica (sessions/platform_budget.py): the calls
-- it may make in sliding windows per bucket, its pauses, and its month's ledger. Every key
-- carries the app's hash tag: one slot (keys.py). Time is Redis's (TIME), so every replica
-- agrees; scores and waits are microseconds.
-- ARGV[1] is the operation:
-- 'take': KEYS 1 the app's pause, 2 the month's ledger, then per bucket its pause and its
--   windows' logs (zset: call -> µs), and last the line's hash when there is a line. ARGV 2
--   calls asked (>= 1), 3 month limit (-1: none), 4 µs to the next month, 5 the ledger's TTL
--   (ms), 6 a token unique to the call, 7 the line's bucket ('' none), 8 the caller's name in
--   it, 9 the rank of its first call asked, 10 the rank of its next waiting call after those
--   (-1: none), 11 how long past its wait a caller keeps its place (µs), 12 the slack: how much
--   lower another's rank must be to go first; then per bucket: its name, its number of
--   windows, and per window its limit and length (ms).
--   The line: each other caller whose first waiting call ranks before this one's by more than
--   the slack and who is due back (its wait plus the grace not over) is owed one call of the
--   line bucket's room first, so a replica whose calls fell behind goes next.
--   Grants g = the room left in every window (and the month) past what the line owes, at most
--   the calls asked, and records g calls in every window and the ledger. Returns {g, wait µs,
--   denied by ('' when all granted: else 'pause', 'month' or a bucket's name), the month's
--   calls after}. The caller's place: its next call's rank when all were granted (none: it
--   leaves the line), its first's until its wait and the grace are over when not (it leaves
--   the line when a chat's limit denied it: the API's room is no use to it meanwhile).
-- 'pause': KEYS 1 a pause; ARGV 2 its length (ms). Extends a shorter pause, never shortens one.
-- 'uncount': KEYS 1 the ledger; ARGV 2 calls. Takes them off (not below 0); returns what is left.
if redis.replicate_commands then redis.replicate_commands() end  -- TIME then writes (Redis < 5)
local op = ARGV[1]
if op == 'pause' then
  local ms = tonumber(ARGV[2])
  if redis.call('PTTL', KEYS[1]) < ms then redis.call('SET', KEYS[1], '1', 'PX', ms) end
  return 0
elseif op == 'uncount' then
  local used = tonumber(redis.call('GET', KEYS[1]) or '0')
  if used <= 0 then return 0 end
  local left = math.max(used - tonumber(ARGV[2]), 0)
  redis.call('SET', KEYS[1], left, 'KEEPTTL')
  return left
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = tonumber(ARGV[2])
local used = tonumber(redis.call('GET', KEYS[2]) or '0')

-- The buckets' windows: {key, bucket, limit, length µs}, and their pauses.
local windows, pauses = {}, {KEYS[1]}
local ki, ai = 3, 13
while ai <= #ARGV do
  local name, count = ARGV[ai], tonumber(ARGV[ai + 1])
  pauses[#pauses + 1] = KEYS[ki]
  ki, ai = ki + 1, ai + 2
  for _ = 1, count do
    windows[#windows + 1] = {KEYS[ki], name, tonumber(ARGV[ai]), tonumber(ARGV[ai + 1]) * 1000}
    ki, ai = ki + 1, ai + 2
  end
end

-- A pause denies everything until its end (the longest of those touched).
local paused = 0
for _, key in ipairs(pauses) do paused = math.max(paused, redis.call('PTTL', key)) end
if paused > 0 then return {0, paused * 1000, 'pause', used} end

local month_limit, month_left = tonumber(ARGV[3]), tonumber(ARGV[4])
if month_limit >= 0 and used >= month_limit then return {0, month_left, 'month', used} end

-- The line: callers due back whose first call ranks before this one's, each owed one call.
local line, me, first, slack = ARGV[7], ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[12])
local line_key, ahead = nil, 0
if line ~= '' then
  line_key = KEYS[#KEYS]
  local places = redis.call('HGETALL', line_key)
  for i = 1, #places, 2 do
    if places[i] ~= me then
      local rank, due = string.match(places[i + 1], '^(%S+) (%S+)$')
      if tonumber(due) < now then
        redis.call('HDEL', line_key, places[i])  -- gone: it kept no place
      elseif tonumber(rank) < first - slack then
        ahead = ahead + 1
      end
    end
  end
end

local g = n
if month_limit >= 0 then g = math.min(g, month_limit - used) end
for _, w in ipairs(windows) do
  redis.call('ZREMRANGEBYSCORE', w[1], '-inf', now - w[4])  -- those that left the window
  w[5] = redis.call('ZCARD', w[1])
  w[6] = (w[2] == line) and ahead or 0  -- owed to the line
  g = math.max(math.min(g, w[3] - w[5] - w[6]), 0)
end

-- Short of the calls asked: the wait is the longest of the constraints left without room,
-- each until it has room for one call again.
local wait, by = 0, ''
if g < n then
  if month_limit >= 0 and used + g >= month_limit then wait, by = month_left, 'month' end
  for _, w in ipairs(windows) do
    local after = w[5] + w[6] + g
    if after >= w[3] then
      -- Room again once the entry at rank after - limit (oldest first) leaves; a rank past
      -- the logged entries is one of the calls granted (or owed) now.
      local at, rank = now, after - w[3]
      if rank < w[5] then
        at = tonumber(redis.call('ZRANGE', w[1], rank, rank, 'WITHSCORES')[2])
      end
      local left = at + w[4] - now
      if left > wait then wait, by = left, w[2] end
    end
  end
end

if g > 0 then
  local stamp = t[1] .. '.' .. t[2] .. ':' .. ARGV[6] .. ':'
  for _, w in ipairs(windows) do
    local i = 0
    while i < g do  -- ZADD in chunks: unpack has a stack limit
      local args = {}
      for j = i + 1, math.min(i + 500, g) do
        args[#args + 1] = now
        args[#args + 1] = stamp .. j
      end
      redis.call('ZADD', w[1], unpack(args))
      i = i + 500
    end
    redis.call('PEXPIRE', w[1], w[4] / 1000 + 1)  -- just past the window: idle logs vanish
  end
  used = redis.call('INCRBY', KEYS[2], g)
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
end

if line_key then
  local next_rank, grace = tonumber(ARGV[10]), tonumber(ARGV[11])
  if g < n and string.sub(by, 1, 5) ~= 'chat:' then
    redis.call('HSET', line_key, me, ARGV[9] .. ' ' .. (now + wait + grace))
  elseif g >= n and next_rank >= 0 then
    redis.call('HSET', line_key, me, ARGV[10] .. ' ' .. (now + grace))
  else
    redis.call('HDEL', line_key, me)
  end
  redis.call('PEXPIRE', line_key, 60000)
end
return {g, wait, by, used}

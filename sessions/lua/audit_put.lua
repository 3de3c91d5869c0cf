-- Store one audit record of an integration, index it, and trim the trail (sessions/audit.py).
-- Every key carries the integration's hash tag: one slot (keys.py).
-- KEYS: 1 records hash, 2 ends index, 3 chat index, 4 session index, 5 outcome index,
--       6 sessions index, 7 session info hash, 8 the integration's event stream, 9 its archive
--       outbox (sessions/outbox.py)
-- ARGV: 1 record id, 2 record json, 3 end ms, 4 now ms, 5 retention ms, 6 max records,
--       7 session id ('' for none), 8 session info json (used when the session has none yet),
--       9 outcome, 10 the event stream's max length (MAXLEN ~; 0: no row), 11 the outbox's
--       bound (0: no archive), 12.. the turn's row as field, value pairs
-- Returns {records the integration keeps, 1 queued for the archive | 0 not asked | -1 full}.
local id, end_ms = ARGV[1], tonumber(ARGV[3])
local cutoff = tonumber(ARGV[4]) - tonumber(ARGV[5])
local max = tonumber(ARGV[6])
local sid = ARGV[7]
local BATCH = 1000  -- at most this many removed per index per call (a script stays short)

redis.call('HSET', KEYS[1], id, ARGV[2])
redis.call('ZADD', KEYS[2], end_ms, id)
redis.call('ZADD', KEYS[3], end_ms, id)
redis.call('ZADD', KEYS[5], end_ms, id)
if sid ~= '' then
  redis.call('ZADD', KEYS[4], end_ms, id)
  local raw = redis.call('HGET', KEYS[7], sid)
  local info = cjson.decode(raw or ARGV[8])
  info['turns'] = (tonumber(info['turns']) or 0) + 1
  if type(info['outcomes']) ~= 'table' then info['outcomes'] = {} end
  info['outcomes'][ARGV[9]] = (tonumber(info['outcomes'][ARGV[9]]) or 0) + 1
  info['lastOutcome'] = ARGV[9]
  info['lastTurnId'] = id
  info['lastActiveAt'] = math.max(tonumber(info['lastActiveAt']) or 0, end_ms)
  redis.call('HSET', KEYS[7], sid, cjson.encode(info))
  redis.call('ZADD', KEYS[6], info['lastActiveAt'], sid)
end

-- The integration's index decides what is kept: past the retention, then past the cap, a
-- record goes together with its index entry.
local function drop(index, hash, ids)
  if #ids > 0 then
    redis.call('ZREM', index, unpack(ids))
    redis.call('HDEL', hash, unpack(ids))
  end
end
local function trim(index, hash)
  drop(index, hash, redis.call('ZRANGEBYSCORE', index, '-inf', '(' .. cutoff, 'LIMIT', 0, BATCH))
  local over = redis.call('ZCARD', index) - max
  if over > 0 then drop(index, hash, redis.call('ZRANGE', index, 0, math.min(over, BATCH) - 1)) end
end
trim(KEYS[2], KEYS[1])
trim(KEYS[6], KEYS[7])
-- The other indexes only point at records: trimmed the same way, an entry whose record the cap
-- took earlier is skipped by the readers until then.
for _, index in ipairs({KEYS[3], KEYS[4], KEYS[5]}) do
  redis.call('ZREMRANGEBYSCORE', index, '-inf', '(' .. cutoff)
  redis.call('ZREMRANGEBYRANK', index, 0, -(max + 1))
end
-- The turn's row in the integration's event stream (GET /v1.0/audit/events), in this call.
if tonumber(ARGV[10]) > 0 and #ARGV >= 12 then
  local fv = {}
  for i = 12, #ARGV do fv[#fv + 1] = ARGV[i] end
  redis.call('XADD', KEYS[8], 'MAXLEN', '~', ARGV[10], '*', unpack(fv))
end
-- The record for the archive, in the same step that stores it: nothing recorded is missed.
-- Bounded: a full outbox (the database away too long) takes no more and says so.
local queued = 0
local bound = tonumber(ARGV[11])
if bound > 0 then
  if redis.call('XLEN', KEYS[9]) >= bound then
    queued = -1
  else
    redis.call('XADD', KEYS[9], '*', 'kind', 'turn', 'id', id, 'body', ARGV[2])
    queued = 1
  end
end
-- The outbox has no expiry: its entries leave once the archive committed them.
for i = 1, 8 do redis.call('PEXPIRE', KEYS[i], ARGV[5]) end
return {redis.call('ZCARD', KEYS[2]), queued}

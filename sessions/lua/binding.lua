-- Continue the conversation's session, or open a new one when there is none, it was ended, or it
-- was idle longer than sessionTimeoutSeconds (docs/architecture.md, "Sessions").
-- KEYS: 1 binding, 2 the conversation's in-flight turn (gets the session id, if it exists)
-- ARGV: 1 now ms, 2 idle timeout ms, 3 new session id, 4 xpert id, 5 snapshot hash,
--       6 ttl ms, 7 count this turn (1/0), 8 the turn id the turn's card buttons carry (the
--       session's current card: a click on an older card's "New conversation" is stale)
-- Returns {'continue'|'new', json of the binding}
local now = tonumber(ARGV[1])
local b = redis.call('HMGET', KEYS[1], 'sessionId', 'lastActiveAt')
local state = 'continue'
if (not b[1]) or (now - tonumber(b[2]) > tonumber(ARGV[2])) then
  state = 'new'
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'sessionId', ARGV[3], 'xpertId', ARGV[4], 'snapshot', ARGV[5],
    'createdAt', now, 'turns', 0)
end
redis.call('HSET', KEYS[1], 'lastActiveAt', now)
if ARGV[7] == '1' then redis.call('HINCRBY', KEYS[1], 'turns', 1) end
if ARGV[8] and ARGV[8] ~= '' then redis.call('HSET', KEYS[1], 'cardTurn', ARGV[8]) end
redis.call('PEXPIRE', KEYS[1], ARGV[6])
if redis.call('EXISTS', KEYS[2]) == 1 and not redis.call('HGET', KEYS[2], 'session') then
  redis.call('HSET', KEYS[2], 'session', redis.call('HGET', KEYS[1], 'sessionId'))
end
local flat = redis.call('HGETALL', KEYS[1])
local t = {}
for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
return {state, cjson.encode(t)}

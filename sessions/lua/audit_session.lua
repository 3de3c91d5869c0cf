-- List a new session in an integration's audit trail (sessions/audit.py), at once: its summary
-- unless it has one, and its place in the sessions index (never moved back in time); with an
-- outbox bound, the session's row for the archive too (sessions/outbox.py), unless it is full.
-- KEYS: 1 session info hash, 2 sessions index, 3 the archive outbox (one slot: the
--       integration's hash tag)
-- ARGV: 1 session id, 2 summary json, 3 at ms, 4 ttl ms, 5 outbox bound (0: none),
--       6 the archive's row json
-- Returns 1 queued for the archive | 0 not asked | -1 full.
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], 'GT', ARGV[3], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
local bound = tonumber(ARGV[5])
if bound <= 0 then return 0 end
if redis.call('XLEN', KEYS[3]) >= bound then return -1 end
redis.call('XADD', KEYS[3], '*', 'kind', 'session', 'id', ARGV[1], 'body', ARGV[6])
return 1

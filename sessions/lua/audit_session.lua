-- List a new session in an integration's audit trail (sessions/audit.py), at once: its summary
-- unless it has one, and its place in the sessions index (never moved back in time).
-- KEYS: 1 session info hash, 2 sessions index (one slot: the integration's hash tag)
-- ARGV: 1 session id, 2 summary json, 3 at ms, 4 ttl ms
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], 'GT', ARGV[3], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1

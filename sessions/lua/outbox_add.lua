-- Queue one entry for the archive (sessions/outbox.py), unless the outbox is full.
-- KEYS: 1 the integration's outbox   ARGV: 1 bound, 2 kind, 3 id, 4 body (JSON)
-- Returns 1 queued, -1 full. The outbox has no expiry: entries leave once archived.
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[1]) then return -1 end
redis.call('XADD', KEYS[1], '*', 'kind', ARGV[2], 'id', ARGV[3], 'body', ARGV[4])
return 1

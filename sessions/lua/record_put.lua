-- An adapter's record (sessions/records.py RecordStore.put), through the auto-pipeline.
-- KEYS: 1 record. ARGV: 1 value, 2 ttl ms
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1

-- An adapter's record (sessions/records.py RecordStore.delete), through the auto-pipeline.
-- KEYS: 1 record
return redis.call('DEL', KEYS[1])

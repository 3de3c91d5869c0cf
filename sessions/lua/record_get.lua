-- An adapter's record (sessions/records.py RecordStore.get), through the auto-pipeline.
-- KEYS: 1 record. Returns its value, or nil (false) when there is none
return redis.call('GET', KEYS[1])

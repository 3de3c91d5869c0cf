-- A whole hash and its time to live in ms (HGETALL, PTTL), a read through the auto-pipeline.
-- KEYS: 1 hash   Returns {flat field/value list, pttl}
return {redis.call('HGETALL', KEYS[1]), redis.call('PTTL', KEYS[1])}

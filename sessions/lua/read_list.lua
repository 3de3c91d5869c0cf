-- A whole list, as LRANGE 0 -1 (a read through the auto-pipeline). KEYS: 1 list
return redis.call('LRANGE', KEYS[1], 0, -1)

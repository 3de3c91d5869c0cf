-- Put a record into a chat transcript and publish the change, atomically.
-- KEYS: 1 records hash, 2 order list
-- ARGV: 1 record id, 2 record json, 3 mode: create (only if new) | upsert, 4 ttl ms, 5 max records,
--       6 channel, 7 change json (published with "record" spliced in by the caller),
--       8 PUBLISH | SPUBLISH (sharded pub/sub: the channel is in this chat's slot)
-- Returns 1 when written, 0 when create found the id taken.
if ARGV[3] == 'create' then
  if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
  redis.call('RPUSH', KEYS[2], ARGV[1])
  while redis.call('LLEN', KEYS[2]) > tonumber(ARGV[5]) do
    redis.call('HDEL', KEYS[1], redis.call('LPOP', KEYS[2]))
  end
else
  if redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) == 1 then
    redis.call('RPUSH', KEYS[2], ARGV[1])
  end
end
-- Transcripts are a development aid: they expire a week after the last change.
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call(ARGV[8], ARGV[6], ARGV[7])
return 1

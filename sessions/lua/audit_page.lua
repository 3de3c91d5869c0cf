-- One page of an audit index with the entries it points at, in one round trip (read only).
-- KEYS: 1 hash (records or session info), 2 index (a sorted set of the hash's fields)
-- ARGV: 1 'desc' | 'asc', 2 highest score, 3 lowest score, 4 offset, 5 count
-- Returns {ids, values}: a value is false where the index points at nothing any more.
local ids
if ARGV[1] == 'asc' then
  ids = redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[3], ARGV[2], 'LIMIT', ARGV[4], ARGV[5])
else
  ids = redis.call('ZREVRANGEBYSCORE', KEYS[2], ARGV[2], ARGV[3], 'LIMIT', ARGV[4], ARGV[5])
end
if #ids == 0 then return {{}, {}} end
return {ids, redis.call('HMGET', KEYS[1], unpack(ids))}

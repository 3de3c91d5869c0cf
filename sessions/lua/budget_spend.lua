-- A finished turn's tokens, added to its conversation's count of the day, and the conversation
-- marked as used in its shard's usage index.
-- KEYS: 1 the day's tokens, 2 the shard's usage index
-- ARGV: 1 tokens, 2 the end of the day (ms), 3 conversation, 4 now (ms), 5 how long the usage
--       index keeps a conversation (ms)
-- Returns the day's tokens so far.
local total = redis.call('INCRBY', KEYS[1], ARGV[1])
-- An hour after the day ends, by the caller's clock (Redis's may differ a little).
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) - tonumber(ARGV[4]) + 3600000)
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tonumber(ARGV[4]) - tonumber(ARGV[5]))
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return total

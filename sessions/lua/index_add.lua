-- Add a member to a sorted-set index, keep only its newest entries, (re)set its time to live.
-- KEYS: 1 index   ARGV: 1 score, 2 member, 3 entries kept, 4 ttl ms
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(tonumber(ARGV[3]) + 1))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1

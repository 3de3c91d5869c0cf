-- The soonest members of one due shard with their scores: what the flusher reads to find what is
-- due now and when the shard is next due (SessionStore.due_in). A script call so that the read goes
-- through the auto-pipeline with every other call (one write for all the shards read, per server)
-- rather than through the client's own pipeline, which cost the daemon more (issue 15).
-- KEYS: 1 the shard's due index
-- ARGV: 1 how many members at most
-- Returns {member, score, member, score, ...}, soonest first (scores as Redis prints them)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '+inf', 'WITHSCORES', 'LIMIT', 0,
  tonumber(ARGV[1]))

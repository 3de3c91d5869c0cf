-- Append one row to a stream capped near a length (XADD MAXLEN ~), through the auto-pipeline.
-- KEYS: 1 stream   ARGV: 1 max length, 2.. field, value pairs
local fv = {}
for i = 2, #ARGV do fv[#fv + 1] = ARGV[i] end
return redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(fv))

-- A turn's stored context in one call, on the chat's slot (a read through the auto-pipeline):
-- the chat's memory, the session's variables and their time to live in ms and, with a third
-- key, the chat's recent group messages.
-- KEYS: 1 memory list, 2 session variables hash[, 3 group history list]
-- Returns {memory items, flat field/value list of the variables, their pttl[, group items]}
local out = {
  redis.call('LRANGE', KEYS[1], 0, -1),
  redis.call('HGETALL', KEYS[2]),
  redis.call('PTTL', KEYS[2]),
}
if KEYS[3] then out[4] = redis.call('LRANGE', KEYS[3], 0, -1) end
return out

-- Group watch intake: dedup, the watch's cooldown and intake.lua, in ONE step on one slot.
-- sessions/watch.py puts intake.lua's text in place of the marker line below, so a matched
-- message is stored exactly as intake.lua stores any message.
-- KEYS: 1-5 as intake.lua (dedup, burst, burstmeta, due index, turn), 6 the watch's cooldown
-- ARGV: 1-10 as intake.lua (mode collect), 11 watch id, 12 cooldown ms, 13 cooldown value (JSON
--       with 'until', ms): the gateway's clock decides (ARGV 2, injectable in tests); the key's
--       PX, the same length, only removes it afterwards
-- Returns {status, due_ms, busy}: status is dup | cool (nothing stored, dedup not marked: the
-- message is the chat's chatter) | fired (the cooldown began) | merged (cooling down, but the
-- burst this watch's match opened is still unclaimed: the message joins it) | full (as
-- intake.lua: over the burst's cap, not stored)
local function intake()
--INTAKE--
end

if redis.call('EXISTS', KEYS[1]) == 1 then return {'dup', 0, 0} end
local state = 'fired'
local cooldown = tonumber(ARGV[12])
local held = cooldown > 0 and redis.call('GET', KEYS[6])
if held and (tonumber(cjson.decode(held)['until']) or 0) > tonumber(ARGV[2]) then
  state = 'cool'
  for _, item in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
    local queued = cjson.decode(item)
    if queued['kind'] == 'watch' and type(queued['trigger']) == 'table'
        and queued['trigger']['id'] == ARGV[11] then
      state = 'merged'
      break
    end
  end
  if state == 'cool' then return {'cool', 0, 0} end
elseif cooldown > 0 then
  redis.call('SET', KEYS[6], ARGV[13], 'PX', cooldown)
end
local result = intake()
if result[1] ~= 'full' then result[1] = state end  -- full: over the burst's cap, not stored
return result

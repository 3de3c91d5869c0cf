-- Apply variable writes with their reducers, atomically (docs/architecture.md, "Sessions").
-- KEYS: 1 session variables hash   ARGV: 1 ttl ms, then triples: name, reducer, json value
-- Values are stored as JSON under "var.<name>". replace: overwrite; append: add to a list (a
-- list value adds each item); merge: shallow-merge an object into the stored object.
-- backend: the expert backend's own value after its reducers ran, stored as it is under
-- "var.<name>" and, as what the backend holds, under "backend.<name>"; sent: only the latter
-- (a value just handed to the backend, not to be sent again while unchanged). seen: a value the
-- turn saw (sys.*, memory.rules), stored as it is under its own name (not JSON, no "var.").
local function decode(raw)
  if not raw then return nil end
  local ok, value = pcall(cjson.decode, raw)
  if ok then return value end
  return nil
end
local function is_list(t)
  if type(t) ~= 'table' then return false end
  local n = 0
  for k, _ in pairs(t) do
    if type(k) ~= 'number' then return false end
    n = n + 1
  end
  return n == #t
end
for i = 2, #ARGV, 3 do
  local field = 'var.' .. ARGV[i]
  local reducer, raw = ARGV[i + 1], ARGV[i + 2]
  if reducer == 'append' then
    local current = decode(redis.call('HGET', KEYS[1], field))
    if not is_list(current) then current = {} end
    local value = decode(raw)
    if is_list(value) and next(value) ~= nil then
      for _, item in ipairs(value) do current[#current + 1] = item end
    else
      current[#current + 1] = value
    end
    local encoded = cjson.encode(current)
    if encoded == '{}' then encoded = '[]' end
    redis.call('HSET', KEYS[1], field, encoded)
  elseif reducer == 'merge' then
    local current = decode(redis.call('HGET', KEYS[1], field))
    if type(current) ~= 'table' or is_list(current) and next(current) ~= nil then current = {} end
    local value = decode(raw)
    if type(value) == 'table' then
      for k, v in pairs(value) do current[k] = v end
    end
    redis.call('HSET', KEYS[1], field, cjson.encode(current))
  elseif reducer == 'default' then
    redis.call('HSETNX', KEYS[1], field, raw)
  elseif reducer == 'backend' then
    redis.call('HSET', KEYS[1], field, raw, 'backend.' .. ARGV[i], raw)
  elseif reducer == 'sent' then
    redis.call('HSET', KEYS[1], 'backend.' .. ARGV[i], raw)
  elseif reducer == 'seen' then
    redis.call('HSET', KEYS[1], ARGV[i], raw)
  else
    redis.call('HSET', KEYS[1], field, raw)
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1

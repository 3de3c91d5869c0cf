-- A message under its budget (budget_intake.lua) and, when that leaves it due at once with no
-- turn running, the claim of its turn (claim.lua) in the same step: one round trip from the
-- webhook to a turn this replica owns (issue 15). sessions/budgets.py puts the two scripts'
-- text in place of the marker lines below; each keeps reading its own KEYS and ARGV.
-- KEYS: 1-10 as budget_intake.lua, 11 the conversation's lease, 12 its binding
-- ARGV: 1-17 as budget_intake.lua, 18 owner token, 19 lease ms, 20 new turn id, 21 turn ttl ms,
--       22 session idle timeout ms, 23 binding ttl ms, 24 split by sender ('1')
-- Returns budget_intake.lua's reply, with claim.lua's as a 5th item when the claim was tried.
local function budget_intake()
--BUDGET--
end

local function claim(KEYS, ARGV)
--CLAIM--
end

local result = budget_intake()
if result[1] == 'queued' and tonumber(result[3]) == 0 and tonumber(result[2]) <= tonumber(ARGV[2]) then
  result[5] = claim({KEYS[4], KEYS[11], KEYS[2], KEYS[3], KEYS[5], KEYS[12]},
    {ARGV[7], ARGV[2], ARGV[18], ARGV[19], ARGV[20], ARGV[21], ARGV[22], ARGV[23], ARGV[24]})
end
return result

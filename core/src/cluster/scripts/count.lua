-- One count of a part without a breaker: a Redis Cluster's /24 or site
-- count in a slot of its own (`Scripts::count`, `Scripts::count_approx`:
-- KEYS, ARGV and the reply). What the one-limit scripts do for a client
-- whose strikes and ban are off, with no breaker keys to pass or read:
-- a refusal counts itself and strikes no one.

-- The refusals of the count (ok) after one more, kept two windows (as
-- `refuse` in `check.lua` counts one without a strike).
local function count_refused(ok, window)
  local over = redis.call('INCRBY', ok, 1)
  if over == 1 then redis.call('PEXPIRE', ok, 2 * window) end
  return over
end

-- An admission's refusals, read only where the next challenge is priced
-- from them (none left, or ARGV[4] '0': the request paid), else 0.
local function count_over(ok, left)
  if left > 0 and ARGV[4] ~= '0' then return 0 end
  return tonumber(redis.call('GET', ok) or 0)
end

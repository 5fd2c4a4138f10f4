-- A count's refusal (`count.lua`), a rare path's (`rare.lua`).

-- The refusals of the count (ok) after one more, kept two windows (as
-- `R.refuse` in `refusal.lua` counts one without a strike).
function R.count_refused(ok, window)
  local over = redis.call('INCRBY', ok, 1)
  if over == 1 then redis.call('PEXPIRE', ok, 2 * window) end
  return over
end

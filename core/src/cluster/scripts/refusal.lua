-- A check's red zone (`check.lua`), its rare paths' (`rare.lua`): a wait
-- taken back, and a refusal.

-- Admitted without a solution under a limit that refused the client in
-- about the last window (ok: that limit's refusals): it waited the 429 out,
-- and waiting is paying with time, so one unpaid strike is taken back and
-- that refusal no longer counts. Never below 0; only with strikes.
function R.waited(ok, b, strikes)
  if strikes == 0 then return strikes end
  if tonumber(redis.call('GET', ok) or 0) == 0 then return strikes end
  if tonumber(redis.call('GET', b.uk) or 0) == 0 then return strikes end
  redis.call('DECR', ok)
  redis.call('DECR', b.uk)
  return redis.call('DECR', b.sk)
end

-- n requests refused under a limit whose refusals ok counts, and, for an
-- offence (ARGV's '1' a 429, '2' a failed verification) with strikes on,
-- one strike each until the one that reaches the threshold: later ones
-- are blocked, neither struck nor counted as refusals. Returns the
-- refusals counted, the strikes, what they set off, how many there were
-- and how long a block they opened lasts.
function R.refuse(ok, n, window, offence, strikes, b)
  local struck = 0
  if offence ~= '0' and b.threshold > 0 then
    struck = math.min(n, b.threshold - strikes)
    n = struck
  end
  local over = redis.call('INCRBY', ok, n)
  -- Two windows: a client that waits out its Retry-After (at most a
  -- window) finds its refusal still counted (`R.waited`).
  if over == n then redis.call('PEXPIRE', ok, 2 * window) end
  local tripped, block_ms = 0, 0
  if struck > 0 then strikes, tripped, block_ms = R.strike_n(b, struck, offence == '1') end
  return over, strikes, tripped, struck, block_ms
end

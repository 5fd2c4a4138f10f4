-- What every check script (window, approx, stacked) does first, and with a
-- refusal. A check is `local function check()`, returning its reply and
-- whether it refused; the mode's last part returns the reply.

-- The client's breaker, then Redis's clock: the reply of a blocked client
-- or of a call that came after its deadline (neither writes anything), or
-- nil, its strikes, the time in ms, given key (the check's log) whether
-- key exists when the breaker read it (else nil), and the time as a string
-- when read here (`clock_ms`). A call of several clients' checks reads the
-- clock (and its deadline) once, first, and passes now.
local function check_open(b, now, key)
  local strikes, block, block_ms, has = breaker_status(b, key)
  if block > 0 then return {0, 0, 0, 0, 0, strikes, block, block_ms, 0, 0} end
  if now then return nil, strikes, now, has end
  local now_s
  now, now_s = clock_ms()
  return expired(now), strikes, now, has, now_s
end

-- An admitted request's limit's refusals (ok), read only where the next
-- challenge is priced from them (SPEC 4, "Paying ahead": no request left,
-- or the request paid): as a refusal's price counts them, after a wait's
-- was taken back. Elsewhere the green path reads nothing more (0).
local function priced_over(ok)
  return tonumber(redis.call('GET', ok) or 0)
end

-- n requests refused under a limit whose refusals ok counts, and, for an
-- offence (ARGV's '1' a 429, '2' a failed verification) with strikes on,
-- one strike each until the one that reaches the threshold: later ones
-- are blocked, neither struck nor counted as refusals. Returns the
-- refusals counted, the strikes, what they set off, how many there were
-- and how long a block they opened lasts.
local function refuse(ok, n, window, offence, strikes, b)
  local struck = 0
  if offence ~= '0' and b.threshold > 0 then
    struck = math.min(n, b.threshold - strikes)
    n = struck
  end
  local over = redis.call('INCRBY', ok, n)
  -- Two windows: a client that waits out its Retry-After (at most a
  -- window) finds its refusal still counted (`waited`).
  if over == n then redis.call('PEXPIRE', ok, 2 * window) end
  local tripped, block_ms = 0, 0
  if struck > 0 then strikes, tripped, block_ms = strike_n(b, struck, offence == '1') end
  return over, strikes, tripped, struck, block_ms
end

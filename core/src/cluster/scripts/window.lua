-- The sliding-window log of one limit and the circuit breaker
-- (`SLIDING_WINDOW_SCRIPT`: KEYS, ARGV and the reply).
-- Memory: KEYS[1] holds at most ARGV[1] members, each the member text plus a
-- score (~16 bytes each while listpack-encoded, up to 128 entries; ~70 bytes
-- in a skiplist beyond), and expires one window after its newest entry.
-- KEYS[2..5] are small counters with their own expiry.

-- One client's check: key its log, ok its refusals (nil: `b.named`
-- names them and the unpaid strikes `b.uk` once the check needs them,
-- past a fresh admission: `checks.lua`), under limit
-- requests a window (ms; window_ms the same as ARGV holds it), its member,
-- what a refusal is (offence), its breaker b, k requests at once; now:
-- Redis's clock read already (nil: read here, with the deadline), now_s
-- the same as a string and at_s now + window (or nil: `log_add`). Returns
-- the reply (nil for a fresh admission: the cheapest answer) and whether
-- it refused.
local function window_check(key, ok, limit, window, window_ms, member, offence, b, now, k,
    now_s, at_s)
  local blocked, strikes, has, clock_s
  blocked, strikes, now, has, clock_s = check_open(b, now, key)
  if blocked then return blocked, true end
  now_s = now_s or clock_s

  local count, oldest = 0, nil
  if has ~= false then count, oldest = log_read(key, window, now) end
  -- A fresh admission: one request of a client new in its window, without
  -- strikes (most clients of a busy site), under a limit of more than one
  -- and an offence a wait takes back or none is (its admission reads no
  -- refusals). Its reply is known (`window_one.lua`): nothing else to read, build
  -- or compare.
  if count == 0 and k == 1 and strikes == 0 and limit > 1 and offence ~= '0' then
    log_add(key, now, member, 1, window_ms, now_s, at_s)
    return nil, false
  end
  if not ok then ok = b.named() end
  local allowed = 0
  if count < limit then
    allowed = math.min(k, limit - count)
    log_add(key, now, member, allowed, window_ms, now_s, at_s)
    if count == 0 then oldest = now end
    count = count + allowed
    if offence == '1' and strikes > 0 then strikes = rare().waited(ok, b, strikes) end
  end
  -- ms until the oldest entry leaves the window
  local reset_after = 0
  if oldest then reset_after = math.max(oldest + window - now, 0) end

  local retry_after, over, tripped, struck, block_ms = 0, 0, 0, 0, 0
  if allowed < k then
    local r = rare()
    retry_after = r.log_retry(key, count, limit, window, now)
    over, strikes, tripped, struck, block_ms =
      r.refuse(ok, k - allowed, window, offence, strikes, b)
  elseif count >= limit or offence == '0' then
    -- An admitted request's refusals, read only where the next challenge
    -- is priced from them (SPEC 4, "Paying ahead": no request left, or the
    -- request paid): as a refusal's price counts them, after a wait's was
    -- taken back. Elsewhere the green path reads nothing more (0).
    over = tonumber(redis.call('GET', ok) or 0)
  end
  return {allowed, math.max(limit - count, 0), reset_after, retry_after, over, strikes, 0,
    block_ms, tripped, struck, nil}, allowed < k
end

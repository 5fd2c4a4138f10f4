-- The sliding-window counter (approx) of one limit and the circuit breaker
-- (`APPROX_SCRIPT`: the window script's keys, arguments and reply).
-- Memory: KEYS[1] is a hash of three small integers whatever the limit,
-- expiring when the next fixed window ends. KEYS[2..5] are small counters
-- with their own expiry.
-- `reply` and `refused` (`check.lua`).
local reply, refused
do
  local key = KEYS[1]
  local limit, window = ARGV[1] + 0, ARGV[2] + 0
  local b = breaker(KEYS[3], KEYS[4], KEYS[5], 5)
  local strikes, now
  reply, strikes, now = check_open(b)
  refused = true
  if not reply then
    local index, left, curr, prev, estimate = approx_read(key, window, now)
    local allowed = 0
    if estimate < limit then
      approx_add(key, index, curr, prev, left, window)
      curr, estimate, allowed = curr + 1, estimate + 1, 1
      if ARGV[4] == '1' and strikes > 0 then
        strikes = rare().waited(KEYS[2], b, strikes)
      end
    end

    local retry_after, over, tripped, struck, block_ms = 0, 0, 0, 0, 0
    if allowed == 0 then
      local r = rare()
      retry_after = r.approx_retry(limit, window, left, curr, prev)
      over, strikes, tripped, struck, block_ms =
        r.refuse(KEYS[2], 1, window, ARGV[4], strikes, b)
    elseif math.ceil(estimate) >= limit or ARGV[4] == '0' then
      -- (Read only where the next challenge is priced from them, as in
      -- `window.lua`.)
      over = tonumber(redis.call('GET', KEYS[2]) or 0)
    end
    reply = {allowed, math.max(limit - math.ceil(estimate), 0),
      approx_reset(left, window, curr, prev), retry_after, over, strikes, 0, block_ms, tripped,
      struck, nil}
    refused = allowed == 0
  end
end

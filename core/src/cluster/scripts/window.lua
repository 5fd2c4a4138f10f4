-- The sliding-window log of one limit and the circuit breaker
-- (`SLIDING_WINDOW_SCRIPT`: KEYS, ARGV and the reply).
-- Memory: KEYS[1] holds at most ARGV[1] members, each the member text plus a
-- score (~16 bytes each while listpack-encoded, up to 128 entries; ~70 bytes
-- in a skiplist beyond), and expires one window after its newest entry.
-- KEYS[2..5] are small counters with their own expiry.
local function check()
  local key = KEYS[1]
  local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
  local b = breaker(KEYS[3], KEYS[4], KEYS[5], 5)
  local k = tonumber(ARGV[9])
  local blocked, strikes, now = check_open(b)
  if blocked then return blocked, true end

  local count, oldest = log_read(key, window, now)
  local allowed = 0
  if count < limit then
    allowed = math.min(k, limit - count)
    log_add(key, now, ARGV[3], allowed, ARGV[2])
    if count == 0 then oldest = now end
    count = count + allowed
    if ARGV[4] == '1' then strikes = waited(KEYS[2], b, strikes) end
  end
  -- ms until the oldest entry leaves the window
  local reset_after = 0
  if oldest then reset_after = math.max(oldest + window - now, 0) end

  local retry_after, over, tripped, struck, block_ms = 0, 0, 0, 0, 0
  if allowed < k then
    retry_after = log_retry(key, count, limit, window, now)
    over, strikes, tripped, struck, block_ms =
      refuse(KEYS[2], k - allowed, window, ARGV[4], strikes, b)
  elseif count >= limit or ARGV[4] == '0' then
    over = priced_over(KEYS[2])
  end
  return {allowed, math.max(limit - count, 0), reset_after, retry_after, over, strikes, 0,
    block_ms, tripped, struck}, allowed < k
end

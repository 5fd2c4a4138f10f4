-- The sliding-window log of the count (`Scripts::count`).
local function check()
  local key, ok = KEYS[1], KEYS[2]
  local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
  local now = clock_ms()
  local late = expired(now)
  if late then return late end
  local count, oldest = log_read(key, window, now)
  if count < limit then
    log_add(key, now, ARGV[3], 1, ARGV[2])
    if count == 0 then oldest = now end
    local left = limit - count - 1
    return {1, left, math.max(oldest + window - now, 0), 0, count_over(ok, left), 0, 0, 0, 0, 0},
      false
  end
  local retry = log_retry(key, count, limit, window, now)
  local reset = 0
  if oldest then reset = math.max(oldest + window - now, 0) end
  return {0, 0, reset, retry, count_refused(ok, window), 0, 0, 0, 0, 0}, true
end

-- The sliding-window counter of the count (`Scripts::count_approx`).
local function check()
  local key, ok = KEYS[1], KEYS[2]
  local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
  local now = clock_ms()
  local late = expired(now)
  if late then return late end
  local index, left, curr, prev, estimate = approx_read(key, window, now)
  if estimate < limit then
    approx_add(key, index, curr, prev, left, window)
    curr, estimate = curr + 1, estimate + 1
    local rest = math.max(limit - math.ceil(estimate), 0)
    return {1, rest, approx_reset(left, window, curr, prev), 0, count_over(ok, rest), 0, 0, 0, 0,
      0}, false
  end
  local retry = approx_retry(limit, window, left, curr, prev)
  local rest = math.max(limit - math.ceil(estimate), 0)
  return {0, rest, approx_reset(left, window, curr, prev), retry, count_refused(ok, window), 0, 0,
    0, 0, 0}, true
end

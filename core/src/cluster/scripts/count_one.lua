-- One request's count (`PartScripts::count`: KEYS, ARGV and the reply).
local function check()
  local key, ok = KEYS[1], KEYS[2]
  local limit, window = ARGV[1] + 0, ARGV[2] + 0
  local now, now_s = clock_ms()
  local late = expired(now)
  if late then return late end
  if ARGV[5] ~= '1' then
    return log_count(key, ok, limit, window, ARGV[2], ARGV[3], ARGV[4], now, now_s)
  end
  local c = counter_at(key, window, now)
  local r, refused = approx_count(c, ok, limit, ARGV[4])
  counter_write(c)
  return r, refused
end

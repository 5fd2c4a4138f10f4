-- One request's count (`PartScripts::count`: KEYS, ARGV and the reply).
local function check()
  local key, ok = KEYS[1], KEYS[2]
  local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
  local now = clock_ms()
  local late = expired(now)
  if late then return late end
  if ARGV[5] ~= '1' then
    return log_count(key, ok, limit, window, ARGV[2], ARGV[3], ARGV[4], now)
  end
  local c = counter_at(key, window, now)
  local r, refused = approx_count(c, ok, limit, ARGV[4])
  counter_write(c)
  return r, refused
end

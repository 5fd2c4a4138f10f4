-- One request's count (`PartScripts::count`: KEYS, ARGV and the reply):
-- `reply` and `refused` (`check.lua`).
local reply, refused
do
  local key, ok = KEYS[1], KEYS[2]
  local limit, window = ARGV[1] + 0, ARGV[2] + 0
  local now, now_s, late = clock_ms()
  if late then
    reply = late
  elseif ARGV[5] ~= '1' then
    reply, refused = log_count(key, ok, limit, window, ARGV[2], ARGV[3], ARGV[4], now, now_s)
  else
    local c = counter_at(key, window, now)
    reply, refused = approx_count(c, ok, limit, ARGV[4])
    counter_write(c)
  end
end

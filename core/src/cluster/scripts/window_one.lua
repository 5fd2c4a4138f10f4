-- The window script's check (`Scripts::window`: KEYS, ARGV and the reply),
-- one client's (`window_check`): `reply` and `refused` (`check.lua`).

-- (A fresh admission's reply: admitted, the limit less one remaining,
-- reset in a window. One request at once, '1', is known without parsing:
-- `deadline.lua`.)
local limit, window = ARGV[1] + 0, ARGV[2] + 0
local reply, refused = window_check(KEYS[1], KEYS[2], limit, window, ARGV[2], ARGV[3], ARGV[4],
  breaker(KEYS[3], KEYS[4], KEYS[5], 5), nil, ARGV[9] == '1' and 1 or ARGV[9] + 0)
reply = reply or {1, limit - 1, window, 0, 0, 0, 0, 0, 0, 0, nil}

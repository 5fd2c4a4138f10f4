-- The stacked script's check of one request (`Scripts::stacked`, after
-- `stacks.lua`, which answers a call of several): `reply` and `refused`
-- (`check.lua`).
local reply, refused = stacked_check(0, 0, ARGV[1], nil)

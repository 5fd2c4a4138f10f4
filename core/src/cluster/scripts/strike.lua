-- One strike (`STRIKE_SCRIPT`): a trap hit, a replayed solution, unless the
-- client is blocked.
local b = breaker(KEYS[1], KEYS[2], KEYS[3], 1)
local strikes, block, block_ms = breaker_status(b)
local tripped = 0
if block == 0 and b.threshold > 0 then strikes, tripped, block_ms = rare().strike_n(b, 1, false) end
return {strikes, block, block_ms, tripped}

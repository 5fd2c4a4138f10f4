-- What every check script (window, approx, stacked) does first (a refusal:
-- `refusal.lua`, a rare path's). A check's part ends with the call's check
-- run at the script's top, not as a function of its own (each is a closure
-- made at every call, and each function it calls an upvalue of it): it
-- leaves `reply` and `refused` (its reply, and whether it refused; a late
-- call's reply is `{ok = ...}`) for the mode's last part, which returns
-- the reply. A reply's table is made with an eleventh slot, nil (a reply
-- ends at its first nil): a Redis Cluster's puts the slot's generation
-- there (`slot_reply.lua`), where a table made with ten would grow (Lua
-- reallocates and rehashes it).

-- The client's breaker, then Redis's clock: the reply of a blocked client
-- or of a call that came after its deadline (neither writes anything), or
-- nil, its strikes, the time in ms, given key (the check's log) whether
-- key exists when the breaker read it (else nil), and the time as a string
-- when read here (`clock_ms`). A call of several clients' checks reads the
-- clock (and its deadline) once, first, and passes now.
local function check_open(b, now, key)
  local strikes, block, block_ms, has = breaker_status(b, key)
  if block > 0 then return {0, 0, 0, 0, 0, strikes, block, block_ms, 0, 0, nil} end
  if now then return nil, strikes, now, has end
  local now_s, late
  now, now_s, late = clock_ms()
  return late, strikes, now, has, now_s
end

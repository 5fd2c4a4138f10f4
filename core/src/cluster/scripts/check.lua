-- What every check script (window, approx, stacked) does first (a refusal:
-- `refusal.lua`, a rare path's). A check is `local function check()`,
-- returning its reply and whether it refused; the mode's last part returns
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
  local now_s
  now, now_s = clock_ms()
  return expired(now), strikes, now, has, now_s
end

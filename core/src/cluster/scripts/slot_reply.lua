-- A Redis Cluster: one more integer last, the slot's generation
-- (KEYS[#KEYS]) when the check refused (only a refusal sends a challenge),
-- made if missing; 0 when it admitted, so the green path reads nothing more
-- (measured: the GET and its parsing cost about 3 us of Redis CPU inside a
-- script).
-- (Came after its deadline: the status reply as it is.)
if reply.ok then return reply end
-- (Its eleventh slot, made nil for this: `check.lua`.)
if refused then
  reply[11] = tonumber(rare().slot_generation())
else
  reply[11] = 0
end
return reply

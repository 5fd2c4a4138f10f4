-- A Redis Cluster: one more integer last, the slot's generation
-- (KEYS[#KEYS]) when the check refused (only a refusal sends a challenge),
-- made if missing; 0 when it admitted, so the green path reads nothing more
-- (measured: the GET and its parsing cost about 3 us of Redis CPU inside a
-- script).
local reply, refused = check()
-- (Came after its deadline: the status reply as it is.)
if reply.ok then return reply end
local gen = 0
if refused then gen = rare().slot_generation() end
reply[#reply + 1] = tonumber(gen)
return reply

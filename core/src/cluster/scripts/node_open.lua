-- A Redis Cluster master's call of several slots' gathered stacked checks
-- (`node_stacks.lua`): the gathered stacked checks of one slot, as a call
-- of the stacked script with ARGV[1] '*' would check them, on KEYS and
-- ARGV as that call would have them, in a function called once a slot.
-- Redis's clock is read once a call: every slot's checks see the same.
local node_now = clock_ms()
local function slot_stacks()
local function clock_ms() return node_now end

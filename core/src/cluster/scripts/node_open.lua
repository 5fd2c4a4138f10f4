-- A Redis Cluster master's call of several slots' gathered stacked checks
-- (`node_stacks.lua`): the gathered stacked checks of one slot, as a call
-- of the stacked script with ARGV[1] '*' would check them, on KEYS and
-- ARGV as that call would have them, in a function called once a slot.
local function slot_stacks()

-- The functions of a script's rare paths (a refusal, a strike, a wait taken
-- back, a slot's missing generation): fields of R, made when a call first
-- needs them (`rare()`), not at every call. Redis runs a script's body at
-- every call, and each function the body defines is a closure Lua makes
-- then, and collects after (measured: about 800 instructions of Redis CPU
-- each, a call of the window script defining twenty). The parts between
-- this one and `rare_end.lua` define them (`function R.name`); a script
-- composes those it can call, and its green path calls none.
local R
local function rare()
  if R then return R end
  R = {}

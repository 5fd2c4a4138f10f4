end

-- Several slots' gathered stacked checks in one call to the master the
-- node's slot table says serves them (`Scripts::node_stacks`; declared
-- `allow-cross-slot-keys`, its keys undeclared: Redis Cluster refuses
-- declared keys of several slots). ARGV[1]: how many slots; each slot's
-- keys' count and keys, then its arguments' count and arguments, as a
-- gathered call of the stacked script would have them but the deadline;
-- the call's deadline last, each slot's too.
--
-- A slot's keys are all read (EXISTS) before it runs: one this master does
-- not serve (a stale table, a slot migrating away without the key, one
-- being imported) fails that read, and the slot runs nothing and answers
-- `NOTLOCAL` (the node sends it in a call of its own, which Redis
-- redirects). The slots run in turn, each writing only its own keys; the
-- reply: one element per slot, as that slot's call would answer
-- (`EXPIRED <ms>` after the deadline).
local slots, at, deadline, runs = tonumber(ARGV[1]), 2, ARGV[#ARGV], {}
for s = 1, slots do
  local nk = tonumber(ARGV[at])
  local keys = {unpack(ARGV, at + 1, at + nk)}
  at = at + 1 + nk
  local na = tonumber(ARGV[at])
  local args = {unpack(ARGV, at + 1, at + na)}
  args[#args + 1] = deadline
  at = at + 1 + na
  runs[s] = {keys, args}
end
-- (KEYS and ARGV are the script's own tables: filled in place for each
-- slot, as its call would have them.)
local function fill(t, from)
  for i = #t, 1, -1 do t[i] = nil end
  for i = 1, #from do t[i] = from[i] end
end
local out = {}
for s = 1, slots do
  local keys, args = runs[s][1], runs[s][2]
  local read = redis.pcall('EXISTS', unpack(keys))
  if type(read) == 'table' and read.err then
    out[s] = redis.status_reply('NOTLOCAL')
  else
    fill(KEYS, keys)
    fill(ARGV, args)
    out[s] = slot_stacks()
  end
end
return out

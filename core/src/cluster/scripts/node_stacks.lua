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
local all = ARGV
local slots, at, deadline, runs = tonumber(all[1]), 2, all[#all], {}
for s = 1, slots do
  local nk = tonumber(all[at])
  local na = tonumber(all[at + 1 + nk])
  -- (keys from k + 1, arguments from a + 1, in `all`)
  runs[s] = {at, nk, at + 1 + nk, na}
  at = at + 2 + nk + na
end
-- KEYS and ARGV are filled in place for each slot, as its call would have
-- them, the call's deadline last (ARGV is first kept whole).
local keys, args = KEYS, {}
for i = 1, #all do args[i] = all[i] end
all = args
local out = {}
for s = 1, slots do
  local k, nk, a, na = runs[s][1], runs[s][2], runs[s][3], runs[s][4]
  for i = #keys, nk + 1, -1 do keys[i] = nil end
  for i = 1, nk do keys[i] = all[k + i] end
  local read = redis.pcall('EXISTS', unpack(keys))
  if type(read) == 'table' and read.err then
    out[s] = redis.status_reply('NOTLOCAL')
  else
    for i = #ARGV, na + 2, -1 do ARGV[i] = nil end
    for i = 1, na do ARGV[i] = all[a + i] end
    ARGV[na + 1] = deadline
    out[s] = slot_stacks()
  end
end
return out

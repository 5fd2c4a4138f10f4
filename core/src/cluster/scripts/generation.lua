-- One Redis's data generation (`GENERATION_SCRIPT`): KEYS[1] the gen key,
-- ARGV[1] a fresh random number, used if a new one is needed; returns the
-- key's value, `run_id:number` (a plain GET of it later tells whether it
-- changed).
local run = rare().run_id()
local v = redis.call('GET', KEYS[1])
if v then
  local at, gen = string.match(v, '^(%w*):(%d+)$')
  if at == run and gen then return v end
end
v = run .. ':' .. ARGV[1]
redis.call('SET', KEYS[1], v)
return v

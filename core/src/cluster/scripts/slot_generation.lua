-- A Redis Cluster's check: the slot's generation (KEYS[#KEYS]), made if
-- missing (only a refusal sends a challenge, which carries it;
-- `generations.lua`).
function R.slot_generation()
  local gk = KEYS[#KEYS]
  return string.match(redis.call('GET', gk) or '', '^%w*:(%d+)$')
    or R.new_generation(gk, R.run_id())
end

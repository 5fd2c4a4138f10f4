-- Data generations (`redis::generation`): a key holding `run_id:number`,
-- the run id of the Redis that wrote it (another run's is stale: a
-- restart, a promoted replica, whose data may lack the last spends).

-- This Redis's run id. INFO costs about 13 us inside a script: only the
-- spend and a missing key call it, never the green path.
local function run_id()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or ''
end

-- A new generation written at gk: Redis's clock in us (unique per slot and
-- run).
local function new_generation(gk, run)
  local t = redis.call('TIME')
  local gen = t[1] .. string.sub('00000' .. t[2], -6)
  redis.call('SET', gk, run .. ':' .. gen)
  return gen
end

-- A Redis Cluster's check: the slot's generation (KEYS[#KEYS]), made if
-- missing (only a refusal sends a challenge, which carries it).
local function slot_generation()
  local gk = KEYS[#KEYS]
  return string.match(redis.call('GET', gk) or '', '^%w*:(%d+)$') or new_generation(gk, run_id())
end

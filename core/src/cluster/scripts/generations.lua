-- Data generations (`redis::generation`): a key holding `run_id:number`,
-- the run id of the Redis that wrote it (another run's is stale: a
-- restart, a promoted replica, whose data may lack the last spends). Rare
-- paths' functions (`rare.lua`): never on a check's green path.

-- This Redis's run id. INFO costs about 13 us inside a script: only the
-- spend and a missing key call it, never the green path.
function R.run_id()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or ''
end

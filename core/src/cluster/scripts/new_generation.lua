-- A new generation written at gk (`generations.lua`): Redis's clock in us
-- (unique per slot and run).
function R.new_generation(gk, run)
  local t = redis.call('TIME')
  local gen = t[1] .. string.sub('00000' .. t[2], -6)
  redis.call('SET', gk, run .. ':' .. gen)
  return gen
end

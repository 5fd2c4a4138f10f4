-- The approximate sliding-window counter (`pow_shield_limit ... approx`):
-- a hash of three small integers (i: the fixed window's index, c: its
-- count, p: the previous window's count), whatever the limit.

-- The counter at now: the fixed window's index, ms left in it, its count,
-- the previous window's, and the estimate over the sliding window.
local function approx_read(key, window, now)
  local index = math.floor(now / window)
  local left = window - (now - index * window)
  local state = redis.call('HMGET', key, 'i', 'c', 'p')
  local curr, prev = 0, 0
  -- (Each field an integer HSET wrote, or false: missing.)
  local at = state[1] and state[1] + 0
  if at == index then
    curr, prev = (state[2] or 0) + 0, (state[3] or 0) + 0
  elseif at == index - 1 then
    prev = (state[2] or 0) + 0
  end
  return index, left, curr, prev, prev * left / window + curr
end

-- One more request in the current fixed window, kept until the next fixed
-- window ends (it reads this one as its previous). (Integers formatted
-- with `%d`, a fraction of what "%.17g" costs.)
local function approx_add(key, index, curr, prev, left, window)
  local f = string.format
  redis.call('HSET', key, 'i', f('%d', index), 'c', f('%d', curr + 1), 'p', f('%d', prev))
  redis.call('PEXPIRE', key, f('%d', left + window))
end

-- ms until every counted request has left: the end of the next fixed
-- window, or of this one if only the previous one counts.
local function approx_reset(left, window, curr, prev)
  if curr > 0 then return left + window end
  if prev > 0 then return left end
  return 0
end

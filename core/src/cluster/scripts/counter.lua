-- The approximate sliding-window counter (`pow_shield_limit ... approx`):
-- a hash of three small integers (i: the fixed window's index, c: its
-- count, p: the previous window's count), whatever the limit.

-- The counter at now: the fixed window's index, ms left in it, its count,
-- the previous window's, the estimate over the sliding window, and whether
-- the hash holds this fixed window already (`approx_add`).
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
  return index, left, curr, prev, prev * left / window + curr, at == index
end

-- n more requests (1 if nil) in the current fixed window, counted curr
-- before them, kept until the next fixed window ends (it reads this one as
-- its previous). A hash that holds this window already (held: the write
-- that started the window's count set i, p and the expiry, the end of the
-- next fixed window, the same instant as this one's would be) takes the
-- count alone. (Integers formatted with `%d`, a fraction of what "%.17g"
-- costs.)
local function approx_add(key, index, curr, prev, left, window, held, n)
  local f = string.format
  n = n or 1
  if held then
    redis.call('HINCRBY', key, 'c', n == 1 and '1' or f('%d', n))
    return
  end
  redis.call('HSET', key, 'i', f('%d', index), 'c', f('%d', curr + n), 'p', f('%d', prev))
  redis.call('PEXPIRE', key, f('%d', left + window))
end

-- ms until every counted request has left: the end of the next fixed
-- window, or of this one if only the previous one counts.
local function approx_reset(left, window, curr, prev)
  if curr > 0 then return left + window end
  if prev > 0 then return left end
  return 0
end

-- Refused: wait until the previous window's share has shrunk enough, or,
-- if this window alone is at the limit, until its share of the next one has.
local function approx_retry(limit, window, left, curr, prev)
  local retry
  if curr < limit then
    retry = math.floor(left - (limit - curr) * window / prev) + 1
  else
    retry = left + math.floor(window - limit * window / curr) + 1
  end
  return math.min(math.max(retry, 1), left + window)
end

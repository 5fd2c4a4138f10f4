-- One count of a part without a breaker: a Redis Cluster's /24 or site
-- count in a slot of its own (`PartScripts::count`, and several requests'
-- in one call: `PartScripts::counts`). What the one-limit scripts do for
-- a client whose strikes and ban are off, with no breaker keys to pass or
-- read: a refusal counts itself and strikes no one. Each answers the ten
-- integers of the window script (strikes, block and struck 0), and
-- whether it refused.

-- An admission's refusals, read only where the next challenge is priced
-- from them (none left, or offence '0': the request paid), else 0.
local function count_over(ok, left, offence)
  if left > 0 and offence ~= '0' then return 0 end
  return tonumber(redis.call('GET', ok) or 0)
end

-- One request under the log at key (its refusals ok; window ms as a
-- number and as ARGV holds it), its member, at now (now_s: the same as a
-- string, `clock_ms`).
local function log_count(key, ok, limit, window, window_ms, member, offence, now, now_s)
  local count, oldest = log_read(key, window, now)
  if count < limit then
    log_add(key, now, member, 1, window_ms, now_s)
    if count == 0 then oldest = now end
    local left = limit - count - 1
    return {1, left, math.max(oldest + window - now, 0), 0, count_over(ok, left, offence), 0, 0,
      0, 0, 0, nil}, false
  end
  local retry = rare().log_retry(key, count, limit, window, now)
  local reset = 0
  if oldest then reset = math.max(oldest + window - now, 0) end
  return {0, 0, reset, retry, rare().count_refused(ok, window), 0, 0, 0, 0, 0, nil}, true
end

-- The approx counter at key as read at now (`approx_read`), to count on.
local function counter_at(key, window, now)
  local index, left, curr, prev = approx_read(key, window, now)
  return {key = key, window = window, index = index, left = left, curr = curr, prev = prev}
end

-- One request under counter c (`counter_at`), counted in c only: the
-- caller writes it (`counter_write`).
local function approx_count(c, ok, limit, offence)
  local window, left = c.window, c.left
  local estimate = c.prev * left / window + c.curr
  if estimate < limit then
    c.curr, c.dirty = c.curr + 1, true
    local rest = math.max(limit - math.ceil(estimate + 1), 0)
    return {1, rest, approx_reset(left, window, c.curr, c.prev), 0, count_over(ok, rest, offence),
      0, 0, 0, 0, 0, nil}, false
  end
  local retry = rare().approx_retry(limit, window, left, c.curr, c.prev)
  return {0, math.max(limit - math.ceil(estimate), 0), approx_reset(left, window, c.curr, c.prev),
    retry, rare().count_refused(ok, window), 0, 0, 0, 0, 0, nil}, true
end

-- What c counted, written (as `approx_add` writes one more).
local function counter_write(c)
  if c.dirty then approx_add(c.key, c.index, c.curr - 1, c.prev, c.left, c.window) end
end

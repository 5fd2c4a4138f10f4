-- Stacked limits (sliding-window logs or counters) and the circuit breaker
-- (`STACKED_SCRIPT`: KEYS, ARGV and the reply).

-- One request's stacked check, its keys from KEYS[ko + 1] on and its
-- arguments from ARGV[ao + 2] on (the stacked script's: ko and ao 0; one
-- of several requests' in one call, whose arguments a set of requests
-- shares: `stacks.lua`), its member; now: Redis's clock read already
-- (nil: read here, with the deadline), now_s the same as a string.
-- Returns the reply and whether it refused.
local function stacked_check(ko, ao, member, now, now_s)
  local b = breaker(KEYS[ko + 1], KEYS[ko + 2], KEYS[ko + 3], ao + 3)
  -- ARGV[7]: '1' for each limit counted approx (a counter), '0' for each
  -- exact one (a log), in the order of the limits: one a limit.
  local approx = ARGV[ao + 7]
  -- ARGV[8]: '1' for each limit counted per client key, '0' for a key=
  -- value's (a network, the site).
  local own = ARGV[ao + 8]
  local n = #approx
  local blocked, strikes, clock_s, _
  blocked, strikes, now, _, clock_s = check_open(b, now)
  if blocked then return blocked, true end
  now_s = now_s or clock_s
  -- Left out of every limit (empty key= values): admitted, nothing counted.
  if n == 0 then return {1, 0, 0, 0, 0, strikes, 0, 0, 0, 0, nil}, false end

  -- Each limit as the one-limit scripts see it, nothing counted yet.
  -- (Each table made with every field it gets, and seen with two slots,
  -- the common stack's: Lua grows a table past its size by a rehash.)
  local seen = {false, false}
  local refusing = 0
  for i = 1, n do
    local key = KEYS[ko + 2 + 2 * i]
    local limit, window = ARGV[ao + 7 + 2 * i] + 0, ARGV[ao + 8 + 2 * i] + 0
    local s
    if string.sub(approx, i, i) == '1' then
      local index, left, curr, prev, estimate = approx_read(key, window, now)
      s = {window = window, retry = 0, approx = true, index = index, left = left, curr = curr,
        prev = prev, allowed = estimate < limit, remaining = 0, reset = 0}
      if s.allowed then
        curr, estimate = curr + 1, estimate + 1
      else
        s.retry = rare().approx_retry(limit, window, left, curr, prev)
      end
      s.remaining = math.max(limit - math.ceil(estimate), 0)
      s.reset = approx_reset(left, window, curr, prev)
    else
      local count, oldest = log_read(key, window, now)
      s = {window = window, retry = 0, approx = false, allowed = count < limit, remaining = 0,
        reset = 0}
      if s.allowed then
        if count == 0 then oldest = now end
        s.remaining = math.max(limit - count - 1, 0)
      else
        s.remaining = 0
        s.retry = rare().log_retry(key, count, limit, window, now)
      end
      s.reset = 0
      if oldest then s.reset = math.max(oldest + window - now, 0) end
    end
    seen[i] = s
    if not s.allowed and refusing == 0 then refusing = i end
  end

  if refusing == 0 then
    local tightest = 1
    for i = 1, n do
      local s, key = seen[i], KEYS[ko + 2 + 2 * i]
      if s.approx then
        approx_add(key, s.index, s.curr, s.prev, s.left, s.window)
      else
        log_add(key, now, member, 1, ARGV[ao + 8 + 2 * i], now_s)
      end
      if s.remaining < seen[tightest].remaining then tightest = i end
    end
    -- A wait is taken back under the first of the client's own limits
    -- that refused it (a key= limit's refusals strike no one).
    if ARGV[ao + 2] == '1' and strikes > 0 then
      for i = 1, n do
        if string.sub(own, i, i) == '1' then
          local was = strikes
          strikes = rare().waited(KEYS[ko + 3 + 2 * i], b, strikes)
          if strikes ~= was then break end
        end
      end
    end
    local s, over = seen[tightest], 0
    -- (Its refusals read only where the next challenge is priced from
    -- them, as in `window.lua`.)
    if s.remaining == 0 or ARGV[ao + 2] == '0' then
      over = tonumber(redis.call('GET', KEYS[ko + 3 + 2 * tightest]) or 0)
    end
    return {1, s.remaining, s.reset, 0, over, strikes, 0, 0, 0, tightest - 1, nil}, false
  end

  local s = seen[refusing]
  -- Refused by a limit that is not the client's own: an unpaid request is
  -- no offence (`Offence::refused`).
  local offence = ARGV[ao + 2]
  if offence == '1' and string.sub(own, refusing, refusing) ~= '1' then offence = '0' end
  local over, tripped, block_ms, _
  over, strikes, tripped, _, block_ms =
    rare().refuse(KEYS[ko + 3 + 2 * refusing], 1, s.window, offence, strikes, b)
  return {0, s.remaining, s.reset, s.retry, over, strikes, 0, block_ms, tripped, refusing - 1,
    nil},
    true
end

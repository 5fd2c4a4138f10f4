-- The exact log's refusal (`log.lua`), a rare path's (`rare.lua`).

-- Refused with count entries counted: ms until a slot frees, when the entry
-- at rank count - limit leaves (the oldest, unless the limit was lowered
-- while entries were counted).
function R.log_retry(key, count, limit, window, now)
  local rank = count - limit
  local entry = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')[2]
  if entry then return math.max(tonumber(entry) + window - now, 0) end
  return 0
end

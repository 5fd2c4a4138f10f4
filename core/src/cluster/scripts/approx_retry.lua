-- The approximate counter's refusal (`counter.lua`), a rare path's
-- (`rare.lua`).

-- Refused: wait until the previous window's share has shrunk enough, or,
-- if this window alone is at the limit, until its share of the next one has.
function R.approx_retry(limit, window, left, curr, prev)
  local retry
  if curr < limit then
    retry = math.floor(left - (limit - curr) * window / prev) + 1
  else
    retry = left + math.floor(window - limit * window / curr) + 1
  end
  return math.min(math.max(retry, 1), left + window)
end

-- The client's breaker alone: a Redis Cluster's part of a request whose
-- every count lies in other slots (`Scripts::standing`: KEYS, ARGV and
-- the reply). What the stacked script answers for a part of no limit.
local function check()
  local b = breaker(KEYS[1], KEYS[2], nil, 1)
  local strikes, block, block_ms = breaker_status(b)
  if block > 0 then return {0, 0, 0, 0, 0, strikes, block, block_ms, 0, 0, nil}, true end
  local late = expired(clock_ms())
  if late then return late end
  return {1, 0, 0, 0, 0, strikes, 0, 0, 0, 0, nil}, false
end

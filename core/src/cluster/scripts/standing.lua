-- The client's breaker alone: a Redis Cluster's part of a request whose
-- every count lies in other slots (`Scripts::standing`: KEYS, ARGV and
-- the reply). What the stacked script answers for a part of no limit.
-- `reply` and `refused` (`check.lua`).
local reply, refused
do
  local strikes, block, block_ms = breaker_status(breaker(KEYS[1], KEYS[2], nil, 1))
  if block > 0 then
    reply, refused = {0, 0, 0, 0, 0, strikes, block, block_ms, 0, 0, nil}, true
  else
    local _, _, late = clock_ms()
    if late then
      reply = late
    else
      reply, refused = {1, 0, 0, 0, 0, strikes, 0, 0, 0, 0, nil}, false
    end
  end
end

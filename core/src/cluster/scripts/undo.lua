-- A request counted under some of its limits and refused under others (a
-- Redis Cluster: its limits lie in several slots, one call each): what one
-- call counted is taken back (`UNDO_SCRIPT`). KEYS the counts (a window's
-- log or an approximate counter); ARGV[1] the request's member, ARGV[2]
-- a '1' for each key that is a counter and a '0' for each log, then each
-- key's window (ms); the deadline last.
-- Returns how many counts were taken back.
local now, _, late = clock_ms()
if late then return late end
local n = 0
for i = 1, #KEYS do
  if string.sub(ARGV[2], i, i) == '1' then
    -- Counted in the current fixed window (a round trip ago): one less
    -- there, never below 0.
    local index = math.floor(now / tonumber(ARGV[2 + i]))
    local state = redis.call('HMGET', KEYS[i], 'i', 'c')
    if tonumber(state[1]) == index and (tonumber(state[2]) or 0) > 0 then
      redis.call('HINCRBY', KEYS[i], 'c', -1)
      n = n + 1
    end
  else
    n = n + redis.call('ZREM', KEYS[i], ARGV[1])
  end
end
return n

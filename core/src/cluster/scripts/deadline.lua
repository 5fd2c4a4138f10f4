-- A call the node gave up on changes nothing (`redis::clock`): its last
-- argument is its deadline in Redis's clock (ms; 0: none). A call that
-- starts after it writes nothing and answers `EXPIRED <ms>`, Redis's clock
-- then (the node learns the offset again from it).

-- Redis's clock in ms (every node reads the same; a replica receives the
-- writes, not TIME).
local function clock_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The reply of a call that came after its deadline, at now; else nil.
local function expired(now)
  local deadline = tonumber(ARGV[#ARGV]) or 0
  if deadline > 0 and now > deadline then
    return redis.status_reply('EXPIRED ' .. string.format('%d', now))
  end
end

-- `pow_shield_admin`'s view of one client (`admin::SHOW_SCRIPT`): KEYS[1..3]
-- its strikes, trips and unpaid strikes, KEYS[3 + i] limit i's sliding log
-- (ARGV[2i - 1] 'w') or approximate counter ('a'), ARGV[2i] its window ms.
-- Returns {strikes, ms they last, trips, ms they last, unpaid, then per
-- limit: requests counted, ms until the oldest leaves}. Writes nothing.
local function ttl(k)
  local t = redis.call('PTTL', k)
  if t < 0 then return 0 end
  return t
end
local out = {tonumber(redis.call('GET', KEYS[1]) or 0), ttl(KEYS[1]),
  tonumber(redis.call('GET', KEYS[2]) or 0), ttl(KEYS[2]), tonumber(redis.call('GET', KEYS[3]) or 0)}
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
for i = 1, #KEYS - 3 do
  local key, kind, window = KEYS[3 + i], ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  local count, reset = 0, 0
  if kind == 'w' then
    -- An entry admitted at t counts while now < t + window.
    local from = '(' .. (now - window)
    count = redis.call('ZCOUNT', key, from, '+inf')
    local oldest = redis.call('ZRANGEBYSCORE', key, from, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if oldest[2] then reset = math.max(tonumber(oldest[2]) + window - now, 0) end
  else
    local s = redis.call('HMGET', key, 'i', 'c', 'p')
    local index = math.floor(now / window)
    local left = window - (now - index * window)
    local at, c, p = tonumber(s[1]), tonumber(s[2]) or 0, tonumber(s[3]) or 0
    if at == index then
      count = math.ceil(p * left / window + c)
      if c > 0 then reset = left + window elseif p > 0 then reset = left end
    elseif at == index - 1 then
      count = math.ceil(c * left / window)
      if c > 0 then reset = left end
    end
  end
  out[#out + 1] = count
  out[#out + 1] = reset
end
return out

-- Several requests' stacked checks in one call, when ARGV[1] is '*' (no
-- member is) (`Scripts::stacked`: KEYS, ARGV and the reply). Request i's
-- keys are the stacked script's but the slot's generation key, in turn; a
-- Redis Cluster's slot generation key last (every request's keys in its
-- slot). ARGV[2]: how many sets of requests share their
-- arguments; each set's: its requests, then the stacked script's ARGV[2]
-- on (what a refusal is, the four breaker rules, approx, own, each
-- limit's requests and window ms); then each request's member in turn
-- (the sets' requests in order), the deadline last. Redis's clock is read
-- once; a call that came after its deadline writes nothing for any
-- request. Each request is checked as the stacked script checks it
-- (`stacked_check`), one after another.
if ARGV[1] == '*' then
local now, now_s, late = clock_ms()
if late then return late end
local sets = ARGV[2] + 0
-- (Where the members start, after every set, and the requests' keys.)
local mi, keys = 3, 0
for _ = 1, sets do
  local limits = #ARGV[mi + 6]
  keys = keys + ARGV[mi] * (3 + 2 * limits)
  mi = mi + 8 + 2 * limits
end
local slot = #KEYS > keys
local out, gen = {}, nil
local ko, at = 0, 3
for _ = 1, sets do
  local n = ARGV[at] + 0
  -- (The stacked script's ARGV[2] is this set's ARGV[at + 1].)
  local ao, limits = at - 1, #ARGV[at + 6]
  for _ = 1, n do
    local r, refused = stacked_check(ko, ao, ARGV[mi], now, now_s)
    out[#out + 1] = string.format('%d %d %d %d %d %d %d %d %d %d', unpack(r))
    -- A Redis Cluster: the slot's generation after a refusal, else 0 (as
    -- `slot_reply.lua`), read once a call.
    if slot then
      if refused and not gen then gen = rare().slot_generation() end
      out[#out + 1] = refused and gen or '0'
    end
    ko, mi = ko + 3 + 2 * limits, mi + 1
  end
  at = at + 8 + 2 * limits
end
-- One bulk string (an array reply is at most 16 elements here).
return table.concat(out, ' ')
end

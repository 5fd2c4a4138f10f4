-- Several requests' counts in one call (`PartScripts::counts`: KEYS, ARGV
-- and the reply), each as `PartScripts::count` checks one. Request i's
-- keys are its count's and its refusals, in turn; the slot's generation
-- key last. ARGV[1]: how many sets of requests share their arguments;
-- each set's five (its requests, limit, window ms, what a refusal is, '1'
-- approx or '0' exact), then each request's member in turn (the sets'
-- requests in order), the deadline last. Redis's clock is read once; a
-- call that came after its deadline writes nothing for any request. An
-- approx counter is read once a call and written once at its end (the
-- requests of a site, or of a /24, share theirs).
local now, now_s, late = clock_ms()
if late then return late end
local out, gen = {}, nil
local sets = ARGV[1] + 0
local ko, mi = 0, 2 + 5 * sets
-- (Each approx counter read, by key, in the order read.)
local counters, read = {}, {}
for at = 2, mi - 1, 5 do
  local n, limit, window = ARGV[at] + 0, ARGV[at + 1] + 0, ARGV[at + 2] + 0
  local window_ms, offence, approx = ARGV[at + 2], ARGV[at + 3], ARGV[at + 4] == '1'
  for _ = 1, n do
    local key, ok = KEYS[ko + 1], KEYS[ko + 2]
    local r, refused
    if approx then
      local c = counters[key]
      if not c then
        c = counter_at(key, window, now)
        counters[key], read[#read + 1] = c, c
      end
      r, refused = approx_count(c, ok, limit, offence)
    else
      r, refused = log_count(key, ok, limit, window, window_ms, ARGV[mi], offence, now, now_s)
    end
    out[#out + 1] = string.format('%d %d %d %d %d %d %d %d %d %d', unpack(r))
    -- The slot's generation after a refusal, else 0 (as `slot_reply.lua`),
    -- read once a call.
    if refused and not gen then gen = rare().slot_generation() end
    out[#out + 1] = refused and gen or '0'
    ko, mi = ko + 2, mi + 1
  end
end
for _, c in ipairs(read) do counter_write(c) end
-- One bulk string (an array reply is at most 16 elements here).
return table.concat(out, ' ')

-- Several clients' checks under one exact limit each, in one call (`Scripts::checks`):
-- client i's keys are KEYS[5i-4 .. 5i] and its arguments ARGV[8i-7 .. 8i],
-- as the window script's first five keys and eight arguments (one request
-- each); a Redis Cluster's slot generation key last (every client in its
-- slot). Redis's clock is read once, and a call that came after its
-- deadline (ARGV's last) writes nothing for any of them.
local now = clock_ms()
local late = expired(now)
if late then return late end
local n = (#ARGV - 1) / 8
local slot = #KEYS > 5 * n
local out, gen = {}, nil
for i = 0, n - 1 do
  local reply, refused = window_check(5 * i, 8 * i, now, 1)
  for _, v in ipairs(reply) do out[#out + 1] = v end
  -- A Redis Cluster: the slot's generation after a refusal, else 0 (as
  -- `slot_reply.lua`), read once a call.
  if slot then
    if refused and not gen then
      local gk = KEYS[#KEYS]
      gen = string.match(redis.call('GET', gk) or '', '^%w*:(%d+)$') or new_generation(gk, run_id())
    end
    out[#out + 1] = refused and gen or 0
  end
end
-- One bulk string of decimal integers (an array reply is at most 16
-- elements here).
return table.concat(out, ' ')

-- Several clients' checks, one request each under one exact limit, in one
-- call (`Scripts::checks`: KEYS, ARGV and the reply). Client i's keys are
-- KEYS[5i-4 .. 5i], the window script's first five; a Redis Cluster's slot
-- generation key last (every client in its slot). ARGV: how many sets of
-- clients under the same rules, each set's eight (its clients, limit,
-- window ms, what a refusal is, the four breaker rules), then each
-- client's member in turn (the sets' clients in order), the deadline last.
-- Redis's clock is read once; a call that came after its deadline writes
-- nothing for any client.
local now = clock_ms()
local late = expired(now)
if late then return late end
-- (Formatted once: every admission's score.)
local now_s = string.format('%d', now)
local out, gen = {}, nil
local sets = tonumber(ARGV[1])
local ko, mi = 0, 2 + 8 * sets
local slot = #KEYS > 5 * (#ARGV - mi)
for at = 2, mi - 1, 8 do
  local n, limit, window = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local window_ms, offence = ARGV[at + 2], ARGV[at + 3]
  -- (When an admission's log expires, formatted once a set.)
  local at_s = string.format('%d', now + window)
  local threshold, ttl = tonumber(ARGV[at + 4]), tonumber(ARGV[at + 5])
  local after, ban = tonumber(ARGV[at + 6]), tonumber(ARGV[at + 7])
  -- (One breaker table a set, its keys each client's.)
  local b = {threshold = threshold, ttl = ttl, after = after, ban = ban}
  for _ = 1, n do
    b.sk, b.tk, b.uk = KEYS[ko + 3], KEYS[ko + 4], KEYS[ko + 5]
    local r, refused =
      window_check(ko, limit, window, window_ms, ARGV[mi], offence, b, now, 1, now_s, at_s)
    -- A client new in its window, admitted, without strikes (most clients
    -- of a busy site): 'n' stands for its ten integers (the node knows
    -- them), for formatting a number costs Redis a snprintf. A fresh
    -- admission (no reply) is one; another check may answer the same.
    if not r or (r[1] == 1 and r[2] == limit - 1 and r[3] == window and r[4] == 0
      and r[5] == 0 and r[6] == 0 and r[8] == 0 and r[9] == 0 and r[10] == 0) then
      out[#out + 1] = 'n'
    else
      out[#out + 1] = table.concat(r, ' ')
      -- A Redis Cluster: the slot's generation after a refusal, else 0 (as
      -- `slot_reply.lua`), read once a call.
      if slot then
        if refused and not gen then gen = slot_generation() end
        out[#out + 1] = refused and gen or 0
      end
    end
    ko, mi = ko + 5, mi + 1
  end
end
-- One bulk string (an array reply is at most 16 elements here).
return table.concat(out, ' ')

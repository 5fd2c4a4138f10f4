-- Several clients' checks, one request each under one exact limit, in one
-- call (`Scripts::checks`: KEYS, ARGV and the reply). One Redis: client
-- i's key is KEYS[i], its log (`<tag>:w:<n>:<ms>`); its other keys share
-- its hash tag and are named here (`keys.rs`'s layout): the strikes and
-- trips for every client, the refusals and unpaid strikes only past a
-- fresh admission (never for one). A name Redis reads and
-- parses, and Lua makes a string of, costs more than one made here. A
-- Redis Cluster: client i's keys are KEYS[5i-4 .. 5i], the window
-- script's first five (every key a script touches declared: during a
-- slot's migration Redis answers the call ASK or TRYAGAIN, which the node
-- follows, where a key named here would fail the script), the slot's
-- generation key last (every client in its slot). ARGV: how many sets of
-- clients under the same rules, each set's eight (its clients, limit,
-- window ms, what a refusal is, the four breaker rules), then the call's
-- member (unique per node, worker and call: every client's admission is
-- in a log of its own; a client named twice in the call has its second
-- admission logged as `<member>.2`, its third `.3`), the deadline last.
-- Redis's clock is read once; a call that came after its deadline writes
-- nothing for any client.
local now, now_s, late = clock_ms()
if late then return late end
local out, gen = {}, nil
local sets = ARGV[1] + 0
local ko, member = 0, ARGV[2 + 8 * sets]
-- (How often each log was named so far in this call: a repeat is logged
-- under a member of its own, as separate calls would log it.)
local named = {}
local clients = 0
for at = 2, 1 + 8 * sets, 8 do clients = clients + ARGV[at] end
local slot = #KEYS > clients
local per = slot and 5 or 1
for at = 2, 1 + 8 * sets, 8 do
  local n, limit, window = ARGV[at] + 0, ARGV[at + 1] + 0, ARGV[at + 2] + 0
  local window_ms, offence = ARGV[at + 2], ARGV[at + 3]
  -- (When an admission's log expires, formatted once a set.)
  local at_s = string.format('%d', now + window)
  -- (One breaker table a set, its keys each client's: b.p the client's
  -- hash tag, its log's name less the set's suffix.)
  local b = breaker(nil, nil, nil, at + 4)
  local suffix = ':w:' .. ARGV[at + 1] .. ':' .. window_ms
  local cut, refusals = -#suffix - 1, ':o:' .. ARGV[at + 1] .. ':' .. window_ms
  b.named = function()
    b.uk = b.p .. ':u'
    return b.p .. refusals
  end
  for _ = 1, n do
    local key, ok = KEYS[ko + 1], nil
    if slot then
      ok, b.sk, b.tk, b.uk = KEYS[ko + 2], KEYS[ko + 3], KEYS[ko + 4], KEYS[ko + 5]
    else
      local p = string.sub(key, 1, cut)
      b.p, b.sk, b.tk = p, p .. ':s', p .. ':t'
    end
    local times = (named[key] or 0) + 1
    named[key] = times
    local r, refused = window_check(key, ok, limit, window, window_ms,
      times == 1 and member or member .. '.' .. times, offence, b, now, 1, now_s, at_s)
    -- A client new in its window, admitted, without strikes (most clients
    -- of a busy site): 'n' stands for its ten integers (the node knows
    -- them), for formatting a number costs Redis a snprintf. A fresh
    -- admission (no reply) is one; another check may answer the same.
    if not r or (r[1] == 1 and r[2] == limit - 1 and r[3] == window and r[4] == 0
      and r[5] == 0 and r[6] == 0 and r[8] == 0 and r[9] == 0 and r[10] == 0) then
      out[#out + 1] = 'n'
    else
      out[#out + 1] = string.format('%d %d %d %d %d %d %d %d %d %d', unpack(r))
      -- A Redis Cluster: the slot's generation after a refusal, else 0 (as
      -- `slot_reply.lua`), read once a call.
      if slot then
        if refused and not gen then gen = rare().slot_generation() end
        out[#out + 1] = refused and gen or '0'
      end
    end
    ko = ko + per
  end
end
-- One bulk string (an array reply is at most 16 elements here).
return table.concat(out, ' ')

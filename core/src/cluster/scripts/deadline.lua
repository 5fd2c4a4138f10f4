-- A call the node gave up on changes nothing (`redis::clock`): its last
-- argument is its deadline in Redis's clock (ms; 0: none). A call that
-- starts after it writes nothing and answers `EXPIRED <ms>`, Redis's clock
-- then (the node learns the offset again from it).

-- Numbers and Redis: a Lua number passed to redis.call is formatted with
-- "%.17g" (for Redis to parse it again), a string passed as it is; Lua's
-- tonumber parses a string twice (`lua_isnumber`, then `lua_tonumber`), an
-- arithmetic `s + 0` once. Each costs Redis more than most commands' own
-- work: the scripts pass strings where they have them and turn ARGV's
-- decimal integers into numbers with `+ 0` (the node sends only those);
-- where one value is common ('0' for a rule that is off), comparing the
-- string first (the same string is the same object in Lua: a pointer's
-- comparison) spares parsing it (measured: about 500 instructions each).
-- The other way, a number that `table.concat` or `..` makes a string of
-- goes through Lua's "%.14g" (about 1,500 instructions); a reply's words
-- (integers all) are formatted with `string.format`'s `%d`, and a constant
-- word written as a string ('0').

-- Redis's clock in ms (every node reads the same; a replica receives the
-- writes, not TIME): as a number, and as the decimal string TIME's two
-- give without arithmetic (its seconds, then the first three digits of its
-- microseconds zero-padded to six: 1765000000 and 2500 make
-- 1765000000002); and the reply of a call that came after its deadline,
-- else nil (every caller asks both: one function, made once a call).
local function clock_ms()
  local t = redis.call('TIME')
  local ms = t[1] .. string.sub('00000' .. t[2], -6, -4)
  local now, deadline = ms + 0, ARGV[#ARGV] + 0
  if deadline > 0 and now > deadline then
    return now, ms, redis.status_reply('EXPIRED ' .. string.format('%d', now))
  end
  return now, ms
end

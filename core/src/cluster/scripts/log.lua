-- The exact sliding-window log: a sorted set of admissions (score: ms,
-- member unique). An entry admitted at t counts while now < t + window.

-- The log at now, trimmed: the entries counted, and the oldest one's time
-- (nil if none). Each Redis call costs most of a microsecond of glue: one
-- to count; for a log that exists, one to trim (its reply: the entries
-- that left) and the oldest entry if one is left. A client new in this
-- window (no log: most clients of a busy site) costs the count alone, or
-- nothing where the caller knows already (`window_check`).
local function log_read(key, window, now)
  local count = redis.call('ZCARD', key)
  if count == 0 then return 0 end
  -- (The bound formatted as an integer: `%d` costs a fraction of "%.17g".)
  count = count - redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
  local oldest
  if count > 0 then oldest = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')[2] + 0 end
  return count, oldest
end

-- n admissions at now (member, or member.1 .. member.n). Only on admission
-- does the key's expiry move: the newest entry decides when it is empty.
-- (window_ms as the string ARGV holds, and now_s, now as a string if the
-- caller has it: Redis formats each Lua number with snprintf, a good part
-- of a call's cost; at_s, now + window as a string if the caller has it:
-- PEXPIREAT, which Redis need not rewrite for replicas as it does PEXPIRE.)
local function log_add(key, now, member, n, window_ms, now_s, at_s)
  if n == 1 then
    redis.call('ZADD', key, now_s or now, member)
  else
    local entries = {}
    for i = 1, n do
      entries[2 * i - 1] = now_s or now
      entries[2 * i] = member .. '.' .. i
    end
    redis.call('ZADD', key, unpack(entries))
  end
  if at_s then
    redis.call('PEXPIREAT', key, at_s)
  else
    redis.call('PEXPIRE', key, window_ms)
  end
end

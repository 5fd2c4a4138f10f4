-- The breaker's strikes (`breaker.lua`), a rare path's (`rare.lua`).

-- n strikes at once (the caller checked the client is not blocked: one, a
-- batch, or the refused part of a coalesced check), as n single strikes
-- would count them: strikes, what the strike crossing the threshold set
-- off (0 nothing, 1 the breaker opened, 2 it opened and banned) and, when
-- it did, how long the block lasts (the later of the strikes' expiry, which
-- an earlier strike elsewhere may have set, and the ban's). The trip window
-- starts at the first trip; the trip that bans restarts it.
function R.strike_n(b, n, unpaid)
  -- (The strike TTL and the ban's ms as ARGV holds them, passed on as they
  -- are, and as numbers.)
  local ttl_ms, ban_ms = ARGV[b.at + 1], ARGV[b.at + 3]
  local strike_ttl, ban = ttl_ms + 0, ban_ms + 0
  local strikes = redis.call('INCRBY', b.sk, n)
  -- A strike never shortens a block: the later expiry stays.
  local ttl = redis.call('PTTL', b.sk)
  if ttl < strike_ttl then
    redis.call('PEXPIRE', b.sk, ttl_ms)
    ttl = strike_ttl
  end
  if unpaid then redis.call('INCRBY', b.uk, n) end
  redis.call('PEXPIRE', b.uk, ttl)
  if strikes < b.threshold or strikes - n >= b.threshold then return strikes, 0, 0 end
  if b.after == 0 then return strikes, 1, ttl end
  local trips = redis.call('INCR', b.tk)
  if trips == 1 or trips >= b.after then redis.call('PEXPIRE', b.tk, ban_ms) end
  if trips >= b.after then
    -- (Banned: `BANNED_TRIPS`, as `breaker.lua` reads it.)
    redis.call('SET', b.tk, 65535, 'PX', ban_ms)
    return strikes, 2, math.max(ttl, ban)
  end
  return strikes, 1, ttl
end

-- The circuit breaker of `limiter/breaker.rs` (`StrikeCounter`), step for
-- step, over three keys of the client: strikes (sk), breaker trips (tk) and
-- unpaid strikes (uk, the strikes of challenges not paid yet: a 429's, the
-- only ones a spend or a wait takes back; they expire with sk). A ban
-- leaves tk at BANNED (`BANNED_TRIPS`): it acts at every location whose
-- breaker counts the key, with `pow_shield_ban` or not.
local BANNED = 65535

-- A call's breaker: its keys, and where its four rules start in ARGV (at:
-- strike threshold, strike TTL ms, ban `after`, ban ms; 0 = off), with the
-- two every check reads as numbers (the two durations, which only a strike
-- reads, are read by `strike_n`).
local function breaker(sk, tk, uk, at)
  return {sk = sk, tk = tk, uk = uk, at = at, threshold = ARGV[at] + 0, after = ARGV[at + 2] + 0}
end

-- strikes, block (0 clear, 1 blocked, 2 banned), ms the block lasts; and,
-- given key (a check's log), whether key exists (else nil). One read of
-- both counters (a ban written elsewhere holds here too). A check first
-- asks EXISTS, naming key thrice (it counts each naming), so a client with
-- neither counter and no log costs one integer reply.
local function breaker_status(b, key)
  if b.threshold == 0 and b.after == 0 then return 0, 0, 0 end
  local has
  if key then
    local n = redis.call('EXISTS', b.sk, b.tk, key, key, key)
    has = n >= 3
    if n % 3 == 0 then return 0, 0, 0, has end
  end
  local both = redis.call('MGET', b.sk, b.tk)
  local strikes, trips = tonumber(both[1] or 0), tonumber(both[2] or 0)
  if trips >= BANNED or (b.after > 0 and trips >= b.after) then
    return strikes, 2, redis.call('PTTL', b.tk)
  end
  if b.threshold > 0 and strikes >= b.threshold then
    return strikes, 1, redis.call('PTTL', b.sk)
  end
  return strikes, 0, 0, has
end

-- n strikes at once (the caller checked the client is not blocked: one, a
-- batch, or the refused part of a coalesced check), as n single strikes
-- would count them: strikes, what the strike crossing the threshold set
-- off (0 nothing, 1 the breaker opened, 2 it opened and banned) and, when
-- it did, how long the block lasts (the later of the strikes' expiry, which
-- an earlier strike elsewhere may have set, and the ban's). The trip window
-- starts at the first trip; the trip that bans restarts it.
local function strike_n(b, n, unpaid)
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
    redis.call('SET', b.tk, BANNED, 'PX', ban_ms)
    return strikes, 2, math.max(ttl, ban)
  end
  return strikes, 1, ttl
end

-- Admitted without a solution under a limit that refused the client in
-- about the last window (ok: that limit's refusals): it waited the 429 out,
-- and waiting is paying with time, so one unpaid strike is taken back and
-- that refusal no longer counts. Never below 0; only with strikes.
local function waited(ok, b, strikes)
  if strikes == 0 then return strikes end
  if tonumber(redis.call('GET', ok) or 0) == 0 then return strikes end
  if tonumber(redis.call('GET', b.uk) or 0) == 0 then return strikes end
  redis.call('DECR', ok)
  redis.call('DECR', b.uk)
  return redis.call('DECR', b.sk)
end

-- The circuit breaker of `limiter/breaker.rs` (`StrikeCounter`), step for
-- step, over three keys of the client: strikes (sk), breaker trips (tk) and
-- unpaid strikes (uk, the strikes of challenges not paid yet: a 429's, the
-- only ones a spend or a wait takes back; they expire with sk). A ban
-- leaves tk at 65535 (`BANNED_TRIPS`): it acts at every location whose
-- breaker counts the key, with `pow_shield_ban` or not. (Its strikes:
-- `strikes.lua`, a rare path's.) (Written as a number, not a local: a
-- local the functions read would be an upvalue of each, which Lua makes
-- at every call.)

-- A call's breaker: its keys, and where its four rules start in ARGV (at:
-- strike threshold, strike TTL ms, ban `after`, ban ms; 0 = off), with the
-- two every check reads as numbers (the two durations, which only a strike
-- reads, are read by `R.strike_n`: `strikes.lua`).
-- (A rule that is off, '0', is known without parsing: `deadline.lua`.)
local function breaker(sk, tk, uk, at)
  local threshold, after = ARGV[at], ARGV[at + 2]
  return {sk = sk, tk = tk, uk = uk, at = at, threshold = threshold == '0' and 0 or threshold + 0,
    after = after == '0' and 0 or after + 0}
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
  if trips >= 65535 or (b.after > 0 and trips >= b.after) then
    return strikes, 2, redis.call('PTTL', b.tk)
  end
  if b.threshold > 0 and strikes >= b.threshold then
    return strikes, 1, redis.call('PTTL', b.sk)
  end
  return strikes, 0, 0, has
end

//! Cluster mode's sliding-window log (docs/operations.md, "Sizing Redis"): one atomic Lua script per
//! shielded request, run with `EVALSHA` (falling back to `EVAL` on
//! `NOSCRIPT`), and the decoding of its reply.

use sha1::{Digest, Sha1};

use crate::limiter::breaker::BreakerRules;
use crate::store::Offence;

/// Lua shared by both scripts: the circuit breaker of `strikes.rs`, step
/// for step. Rules come as four integers (0 = off): strike threshold,
/// strike TTL ms, ban `after`, ban ms.
macro_rules! breaker_lua {
    () => {
        r#"
-- strikes, block (0 clear, 1 blocked, 2 banned), ms the block lasts. One
-- read, of the counters the rules use.
local function breaker_status(sk, tk, threshold, after)
  if threshold == 0 and after == 0 then return 0, 0, 0 end
  local strikes, trips = 0, 0
  if after == 0 then
    strikes = tonumber(redis.call('GET', sk) or 0)
  else
    local both = redis.call('MGET', sk, tk)
    strikes, trips = tonumber(both[1] or 0), tonumber(both[2] or 0)
  end
  if after > 0 and trips >= after then return strikes, 2, redis.call('PTTL', tk) end
  if threshold > 0 and strikes >= threshold then
    return strikes, 1, redis.call('PTTL', sk)
  end
  return strikes, 0, 0
end

-- n strikes at once (a batch, or the refused part of a coalesced check),
-- as n calls of strike() would count them: what the strike crossing the
-- threshold sets off.
local function strike_n(sk, tk, uk, threshold, ttl, after, ban, n, unpaid)
  local strikes = redis.call('INCRBY', sk, n)
  -- A strike never shortens a block: the later expiry stays.
  if redis.call('PTTL', sk) < ttl then redis.call('PEXPIRE', sk, ttl) end
  if unpaid then redis.call('INCRBY', uk, n) end
  redis.call('PEXPIRE', uk, redis.call('PTTL', sk))
  if strikes < threshold or strikes - n >= threshold then return strikes, 0 end
  if after == 0 then return strikes, 1 end
  local trips = redis.call('INCR', tk)
  if trips == 1 or trips >= after then redis.call('PEXPIRE', tk, ban) end
  if trips >= after then return strikes, 2 end
  return strikes, 1
end

-- One strike (the caller checked the client is not blocked): strikes, and
-- what it set off (0 nothing, 1 the breaker opened, 2 it opened and banned).
-- The trip window starts at the first trip; the trip that bans restarts it.
-- uk counts the strikes of challenges not paid yet (`unpaid`: a 429), the
-- only ones a spend takes back; it expires with sk.
local function strike(sk, tk, uk, threshold, ttl, after, ban, unpaid)
  return strike_n(sk, tk, uk, threshold, ttl, after, ban, 1, unpaid)
end

-- Admitted without a solution under a limit that refused the client in
-- about the last window (ok: that limit's refusals): it waited the 429 out,
-- and waiting is paying with time, so one unpaid strike is taken back and
-- that refusal no longer counts. Never below 0; only with strikes.
local function waited(ok, sk, uk, strikes)
  if strikes == 0 then return strikes end
  if tonumber(redis.call('GET', ok) or 0) == 0 then return strikes end
  if tonumber(redis.call('GET', uk) or 0) == 0 then return strikes end
  redis.call('DECR', ok)
  redis.call('DECR', uk)
  return redis.call('DECR', sk)
end
"#
    };
}

/// Lua shared by the approximate counter's scripts (`APPROX_SCRIPT` and
/// the stacked one): the sliding-window counter read at `now`, and when a
/// refused request would be admitted.
macro_rules! approx_lua {
    () => {
        r#"
-- The counter at `now`: the fixed window's index, ms left in it, its count,
-- the previous window's, and the estimate over the sliding window.
local function approx_read(key, window, now)
  local index = math.floor(now / window)
  local left = window - (now - index * window)
  local state = redis.call('HMGET', key, 'i', 'c', 'p')
  local curr, prev = 0, 0
  local at = tonumber(state[1])
  if at == index then
    curr, prev = tonumber(state[2]) or 0, tonumber(state[3]) or 0
  elseif at == index - 1 then
    prev = tonumber(state[2]) or 0
  end
  return index, left, curr, prev, prev * left / window + curr
end

-- Refused: wait until the previous window's share has shrunk enough, or,
-- if this window alone is at the limit, until its share of the next one has.
local function approx_retry(limit, window, left, curr, prev)
  local retry
  if curr < limit then
    retry = math.floor(left - (limit - curr) * window / prev) + 1
  else
    retry = left + math.floor(window - limit * window / curr) + 1
  end
  return math.min(math.max(retry, 1), left + window)
end
"#
    };
}

/// The replies' decoding.
mod replies;
/// Several limits in one call (after the macro: it uses it).
pub mod stacked;

use replies::fields;
pub use replies::*;

/// The sliding-window script, with the client's red-zone state read and
/// written in the same call. Reads Redis's own clock so every node agrees.
///
/// - `KEYS[1]`: the client's sorted set (score = admission ms, member
///   unique); `KEYS[2]`: refusals in the current window; `KEYS[3]`,
///   `KEYS[4]`, `KEYS[5]`: strikes, breaker trips and unpaid strikes (all in
///   one hash tag).
/// - `ARGV[1]` limit, `ARGV[2]` window in ms, `ARGV[3]` unique member
///   ([`write_member`]), `ARGV[4]` what a refusal is (0 nothing, 1 an
///   unpaid strike, 2 a strike never taken back), `ARGV[5..8]` the breaker
///   rules ([`rules`]), `ARGV[9]` (optional, 1 if absent) the requests
///   this call decides at once (a coalesced burst of one client): up to
///   the free slots are admitted, the rest refused, each a strike until
///   the one that reaches the threshold (later ones would have been
///   blocked).
///
/// Returns ten integers, decoded by [`verdict_from_reply`] (one request)
/// or [`coalesced_from_reply`]: `{admitted (0/1 for one request),
/// remaining, reset_after_ms, retry_after_ms, over, strikes, block 0/1/2,
/// block_ms, tripped 0/1/2, struck}`.
/// A blocked client writes nothing. Safe under Redis 7's effects
/// replication: replicas receive the writes, not `TIME`.
pub const SLIDING_WINDOW_SCRIPT: &str = concat!(
    r#"-- pow-shield sliding-window log and circuit breaker
-- Memory: KEYS[1] holds at most ARGV[1] members, each the member text plus a
-- score (~16 bytes each while listpack-encoded, up to 128 entries; ~70 bytes
-- in a skiplist beyond), and expires one window after its newest entry.
-- KEYS[2..4] are small counters with their own expiry."#,
    breaker_lua!(),
    r#"
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local threshold, ttl = tonumber(ARGV[5]), tonumber(ARGV[6])
local after, ban = tonumber(ARGV[7]), tonumber(ARGV[8])

local k = tonumber(ARGV[9] or '1')

local strikes, block, block_ms = breaker_status(KEYS[3], KEYS[4], threshold, after)
if block > 0 then return {0, 0, 0, 0, 0, strikes, block, block_ms, 0, 0} end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- An entry admitted at t counts while now < t + window. Each Redis call
-- costs most of a microsecond of glue: one to trim, one to count, and the
-- oldest entry (it gives reset_after) only if there is one.
local edge = now - window
redis.call('ZREMRANGEBYSCORE', key, '-inf', edge)
local count = redis.call('ZCARD', key)
local oldest
if count > 0 then oldest = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')[2] end

local allowed = 0
if count < limit then
  local admit = math.min(k, limit - count)
  if admit == 1 then
    redis.call('ZADD', key, now, ARGV[3])
  else
    local entries = {}
    for i = 1, admit do
      entries[2 * i - 1] = now
      entries[2 * i] = ARGV[3] .. '.' .. i
    end
    redis.call('ZADD', key, unpack(entries))
  end
  -- Only on admission: the newest entry decides when the key is empty.
  -- (Arguments passed as strings: Redis formats each Lua number with
  -- snprintf, a good part of a call's cost.)
  redis.call('PEXPIRE', key, ARGV[2])
  if count == 0 then oldest = now end
  count = count + admit
  allowed = admit
  if ARGV[4] == '1' then strikes = waited(KEYS[2], KEYS[3], KEYS[5], strikes) end
end
-- ms until the oldest entry leaves the window
local reset_after = 0
if oldest then reset_after = math.max(tonumber(oldest) + window - now, 0) end

-- Refused: a slot frees when the entry at rank count - limit leaves (the
-- oldest, unless the limit was lowered while entries were counted).
local retry_after = 0
local over = 0
local tripped = 0
local struck = 0
if allowed < k then
  local refused = k - allowed
  local rank = count - limit
  local entry = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')[2]
  if entry then retry_after = math.max(tonumber(entry) + window - now, 0) end
  over = redis.call('INCRBY', KEYS[2], refused)
  -- Two windows: a client that waits out its Retry-After (at most a
  -- window) finds its refusal still counted (`waited`).
  if over == refused then redis.call('PEXPIRE', KEYS[2], 2 * window) end
  if ARGV[4] ~= '0' and threshold > 0 then
    struck = math.min(refused, threshold - strikes)
    strikes, tripped = strike_n(KEYS[3], KEYS[4], KEYS[5], threshold, ttl, after, ban, struck,
      ARGV[4] == '1')
  end
end
return {allowed, math.max(limit - count, 0), reset_after, retry_after, over, strikes, 0, 0,
  tripped, struck}
"#
);

/// `pow_shield_limit ... approx`: the sliding-window counter, O(1) memory
/// per client whatever the limit, with the red zone of
/// [`SLIDING_WINDOW_SCRIPT`]; same keys and arguments (`KEYS[1]` is a hash,
/// `ARGV[3]` unused), same reply, one request per call (`ARGV[9]` is not
/// read: checks of the approximate counter are not coalesced).
///
/// Time is cut into fixed windows of `window` ms; the sliding window ending
/// now covers the current one's first `elapsed` ms and the previous one's
/// last `window - elapsed`, whose requests are taken as evenly spread:
/// `estimate = previous × (window − elapsed) / window + current`, and a
/// request is admitted while `estimate < limit`. Error bound: at most
/// `limit` requests are admitted per fixed window, so at most `2 × limit`
/// within any `window`-long span (the exact log: `limit`), the excess
/// possible only when the previous window's requests came late in it; when
/// they came early the counter refuses before the exact count would. With
/// steady traffic it tracks the exact count. `Remaining` is
/// `limit − ⌈estimate⌉`, `Reset` the end of the next fixed window (when
/// every counted request has left), `Retry-After` when the estimate drops
/// below the limit.
pub const APPROX_SCRIPT: &str = concat!(
    r#"-- pow-shield sliding-window counter (approx) and circuit breaker
-- Memory: KEYS[1] is a hash of three small integers whatever the limit (i:
-- the fixed window's index, c: its count, p: the previous window's count),
-- expiring when the next fixed window ends. KEYS[2..4] are small counters
-- with their own expiry."#,
    breaker_lua!(),
    approx_lua!(),
    r#"
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local threshold, ttl = tonumber(ARGV[5]), tonumber(ARGV[6])
local after, ban = tonumber(ARGV[7]), tonumber(ARGV[8])

local strikes, block, block_ms = breaker_status(KEYS[3], KEYS[4], threshold, after)
if block > 0 then return {0, 0, 0, 0, 0, strikes, block, block_ms, 0, 0} end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local index, left, curr, prev, estimate = approx_read(key, window, now)

local allowed = 0
if estimate < limit then
  curr = curr + 1
  estimate = estimate + 1
  redis.call('HSET', key, 'i', index, 'c', curr, 'p', prev)
  -- Until the next fixed window ends: it reads this one as its previous.
  redis.call('PEXPIRE', key, left + window)
  allowed = 1
  if ARGV[4] == '1' then strikes = waited(KEYS[2], KEYS[3], KEYS[5], strikes) end
end
local reset_after = 0
if curr > 0 then reset_after = left + window elseif prev > 0 then reset_after = left end

local retry_after = 0
local over = 0
local tripped = 0
local struck = 0
if allowed == 0 then
  retry_after = approx_retry(limit, window, left, curr, prev)
  over = redis.call('INCR', KEYS[2])
  if over == 1 then redis.call('PEXPIRE', KEYS[2], 2 * window) end
  if ARGV[4] ~= '0' and threshold > 0 then
    strikes, tripped = strike(KEYS[3], KEYS[4], KEYS[5], threshold, ttl, after, ban, ARGV[4] == '1')
    struck = 1
  end
end
return {allowed, math.max(limit - math.ceil(estimate), 0), reset_after, retry_after, over,
  strikes, 0, 0, tripped, struck}
"#
);

/// One strike for a client (a trap hit, a replayed solution), unless it is
/// blocked: `KEYS[1..3]` strikes, trips and unpaid strikes, `ARGV[1..4]` the rules
/// ([`rules`]). Returns `{strikes, block 0/1/2, block_ms, tripped 0/1/2}`
/// ([`standing_from_reply`]).
pub const STRIKE_SCRIPT: &str = concat!(
    "-- pow-shield circuit breaker: one strike",
    breaker_lua!(),
    r#"
local threshold, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local after, ban = tonumber(ARGV[3]), tonumber(ARGV[4])
local strikes, block, block_ms = breaker_status(KEYS[1], KEYS[2], threshold, after)
local tripped = 0
if block == 0 and threshold > 0 then
  strikes, tripped = strike(KEYS[1], KEYS[2], KEYS[3], threshold, ttl, after, ban, false)
end
return {strikes, block, block_ms, tripped}
"#
);

/// Spends a solved challenge and takes back the strike its 429 recorded
/// (one of the client's unpaid strikes, if any), in one call, unless the
/// client is blocked (then nothing changes). `KEYS[1]` the spent record,
/// `KEYS[2..4]` strikes, trips and unpaid strikes, `KEYS[5]` unused here
/// (the data generation of `generation::GEN_SPEND_SCRIPT`), `KEYS[6]`
/// (optional) the spends that found no unpaid strike yet (taken from the next batch of the
/// client's locally refused 429s, [`BATCH_SCRIPT`]); `ARGV[1]` ms the record
/// lives, `ARGV[2..5]` the rules ([`rules`]), `ARGV[6]` how ([`spend_mode`]):
/// 1 (or 3) for a spend the node's zone already decided and writes now
/// (after an outage or a full queue): recorded whatever the breaker says;
/// 2 (or 3) for a solution whose 429 counted no strike (its token's `st`
/// is 0): nothing is taken back.
/// Returns `{spent 0 replayed / 1 first / 2 blocked, strikes, block 0/1/2,
/// block_ms}` ([`spent_from_reply`]).
pub const SPEND_SCRIPT: &str = concat!(
    "-- pow-shield spend: one per solution, and the 429's strike taken back",
    breaker_lua!(),
    r#"
local threshold, after = tonumber(ARGV[2]), tonumber(ARGV[4])
local mode = tonumber(ARGV[6])
if mode % 2 == 0 then
  local strikes, block, block_ms = breaker_status(KEYS[2], KEYS[3], threshold, after)
  if block > 0 then return {2, strikes, block, block_ms} end
end
local strikes = tonumber(redis.call('GET', KEYS[2]) or 0)
if not redis.call('SET', KEYS[1], '1', 'PX', ARGV[1], 'NX') then
  return {0, strikes, 0, 0}
end
-- Only an unpaid strike, never below 0: paying takes back no failed
-- verification. DECR keeps the expiry.
if mode >= 2 then
  -- Its 429 counted no strike: nothing to take back.
elseif strikes > 0 and tonumber(redis.call('GET', KEYS[4]) or 0) > 0 then
  redis.call('DECR', KEYS[4])
  strikes = redis.call('DECR', KEYS[2])
elseif threshold > 0 and KEYS[6] then
  -- No unpaid strike here yet: the 429 was refused by a node whose batch
  -- has not arrived. The batch takes it back (at most `threshold` wait,
  -- for the strike time).
  if redis.call('INCR', KEYS[6]) > threshold then redis.call('DECR', KEYS[6]) end
  redis.call('PEXPIRE', KEYS[6], ARGV[3])
end
return {1, strikes, 0, 0}
"#
);

/// A node's locally refused requests of one client (or of up to
/// [`BATCH_CLIENTS`], each with its six keys and eight arguments in turn),
/// sent in one call (`store::refusals`): `ARGV[1]` the running total of
/// the worker's refusals of the client in run `ARGV[7]`; what it adds to
/// the total Redis applied is counted, each refusal one more in the
/// window's refusal count and, with a strike threshold, one more unpaid
/// strike, as the window script would have counted them one by one.
/// `KEYS[1]` the refusals of the limit, `KEYS[2..4]` strikes,
/// trips and unpaid strikes, `KEYS[5]` the run and total applied from
/// this worker (`keys::ClientKey::Batches`), `KEYS[6]` the spends that found
/// no unpaid strike to take back (`keys::ClientKey::Paid`: they take back
/// as many of the batch's strikes); `ARGV[2]` the window ms,
/// `ARGV[3..6]` the rules ([`rules`]), `ARGV[7]` the run, `ARGV[8]` the
/// total the worker knows Redis applied (where Redis has no record of the
/// run: a new run, or Redis lost its data, only what it adds is counted).
///
/// The strikes of a client blocked meanwhile (by another node) still
/// count (the node did send those 429s), without extending the block or
/// counting a trip (a banned client without strikes takes none). The
/// batch that crosses the threshold opens the breaker (and counts a trip)
/// as the strike reaching it would have.
/// Returns `over strikes block(0/1/2) block_ms tripped(0/1/2)` per client,
/// the breaker after the batch, as one string of decimal integers
/// ([`batch_text`], [`batches_from_reply`]).
pub const BATCH_SCRIPT: &str = concat!(
    "-- pow-shield local refusals: one batch per client, of one or more clients",
    breaker_lua!(),
    r#"
-- Client i's keys are KEYS[6i-5 .. 6i], its arguments ARGV[8i-7 .. 8i].
local out = {}
for i = 0, #KEYS / 6 - 1 do
  local k, a = 6 * i, 8 * i
  local total, window = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local threshold, ttl = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local after, ban = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  local run = tonumber(ARGV[a + 7])
  -- What this worker's calls applied: '<run> <total>'. An earlier run's
  -- call (its entry gone, so all applied) and a total already applied add
  -- nothing. Without a record of the run (a later run, or Redis lost it),
  -- what the worker knows was applied (ARGV[a + 8]) is the start.
  -- (Written first and read back in one call: the record goes back as it
  -- was in the rare case that this call is the older one.)
  local n = total - tonumber(ARGV[a + 8])
  local last = redis.call('SET', KEYS[k + 5], ARGV[a + 7] .. ' ' .. ARGV[a + 1], 'PX', '600000',
    'GET')
  if last then
    local lrun, ltotal = string.match(last, '^(%d+) (%d+)$')
    lrun, ltotal = tonumber(lrun), tonumber(ltotal)
    if lrun and (lrun > run or (lrun == run and ltotal >= total)) then
      redis.call('SET', KEYS[k + 5], last, 'PX', '600000')
      n = 0
    elseif lrun == run then
      n = total - ltotal
    end
  end
  local fresh = n > 0
  local over
  if fresh then
    over = redis.call('INCRBY', KEYS[k + 1], n)
    if over == n then redis.call('PEXPIRE', KEYS[k + 1], 2 * window) end
  else
    over = tonumber(redis.call('GET', KEYS[k + 1]) or 0)
  end
  local sk, tk, uk = KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  local strikes, block, block_ms = breaker_status(sk, tk, threshold, after)
  local tripped = 0
  -- Refusals already paid for (on another node, before this batch came):
  -- no strike.
  if fresh and threshold > 0 then
    local paid = math.min(tonumber(redis.call('GET', KEYS[k + 6]) or 0), n)
    if paid > 0 then redis.call('DECRBY', KEYS[k + 6], paid) end
    n = n - paid
  end
  if fresh and threshold > 0 and n > 0 then
    if block == 0 then
      strikes, tripped = strike_n(sk, tk, uk, threshold, ttl, after, ban, n, true)
    elseif redis.call('PTTL', sk) > 0 then
      -- Blocked meanwhile (by another node): the 429s this node sent still
      -- count, but neither extend the block nor trip again.
      strikes = redis.call('INCRBY', sk, n)
      redis.call('INCRBY', uk, n)
      redis.call('PEXPIRE', uk, redis.call('PTTL', sk))
    end
    strikes, block, block_ms = breaker_status(sk, tk, threshold, after)
  end
  for _, v in ipairs({over, strikes, block, block_ms, tripped}) do out[#out + 1] = v end
end
-- One bulk string of decimal integers: an array reply of every client's
-- five would exceed what the node accepts of a reply (16 elements).
return table.concat(out, ' ')
"#
);

/// Most clients one batch call carries (one Redis; in a Redis Cluster each
/// client's keys are in its own slot: one client per call). Its reply, five
/// decimal integers each, stays within a bulk string the node accepts
/// (`command::MAX_BULK`).
pub const BATCH_CLIENTS: usize = 32;

/// Lower-case hex SHA-1 of a script, the name `EVALSHA` and `SCRIPT LOAD`
/// use.
pub fn script_sha1(script: &str) -> String {
    hex::encode(Sha1::digest(script.as_bytes()))
}

/// What a refusal is, as the window scripts' `ARGV[4]` says it.
pub fn offence(offence: Offence) -> u64 {
    match offence {
        Offence::None => 0,
        Offence::Unpaid => 1,
        Offence::Failed => 2,
    }
}

/// The spend script's `ARGV[6]`: whether the zone already decided the
/// spend (`decided`: written now, whatever the breaker says) and whether
/// it takes back its 429's strike (`forgive`).
pub fn spend_mode(decided: bool, forgive: bool) -> u64 {
    u64::from(decided) + 2 * u64::from(!forgive)
}

/// The red-zone rules as the scripts' four arguments (0 = off).
pub fn rules(rules: BreakerRules) -> [u64; 4] {
    let (threshold, ttl) = rules.strikes.map_or((0, 0), |s| (s.threshold, s.ttl_ms));
    let (after, ban) = rules.ban.map_or((0, 0), |b| (b.after, b.ttl_ms));
    [threshold.into(), ttl, after.into(), ban]
}

/// Writes a sorted-set member unique across nodes, workers and requests
/// within one millisecond: `node_id`, worker `pid` and a per-worker sequence
/// number, in hex. `node_id` must differ between nginx nodes (a random value
/// per worker start also covers pid reuse).
pub fn write_member(out: &mut Vec<u8>, node_id: u64, pid: u32, seq: u64) {
    lower_hex(out, node_id);
    out.push(b':');
    lower_hex(out, pid.into());
    out.push(b':');
    lower_hex(out, seq);
}

/// `n` in lower-case hex without leading zeros (as `{:x}`), without
/// `core::fmt`: one member per shielded request.
fn lower_hex(out: &mut Vec<u8>, n: u64) {
    let digits = (64 - n.leading_zeros()).div_ceil(4).max(1);
    for i in (0..digits).rev() {
        out.push(b"0123456789abcdef"[((n >> (i * 4)) & 0xf) as usize]);
    }
}

#[cfg(test)]
mod tests;

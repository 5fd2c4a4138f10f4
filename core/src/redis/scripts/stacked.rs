//! Stacked limits in cluster mode (`limiter::limits`): every limit of a
//! location checked in one script call, one round trip, with the client's
//! red zone as in the one-limit scripts. The keys are the one-limit
//! scripts' (`keys::ClientKey::{Window, Approx, Refused}` per limit), so a
//! limit keeps its count when a line is added beside it.

use super::{fields, verdict_from_reply, ReplyError, REPLY_LEN};
use crate::limiter::breaker::BreakerStatus;
use crate::limiter::{Limits, Verdict};

/// The script for a location's limits, all exact or all `approx`.
///
/// - `KEYS[1..3]`: strikes, breaker trips and unpaid strikes; then per
///   limit `i` (from 1) `KEYS[2 + 2i]` its log (a sorted set) or counter
///   (a hash) and `KEYS[3 + 2i]` its refusals in the window.
/// - `ARGV[1]` the unique member, `ARGV[2]` what a refusal is (as the
///   one-limit scripts' `ARGV[4]`), `ARGV[3..6]` the breaker rules,
///   `ARGV[7]` 1 for `approx`; then per limit `ARGV[6 + 2i]` requests and
///   `ARGV[7 + 2i]` window ms.
///
/// Each limit is first read as it would be with this request counted;
/// then the request is counted by every limit if all have room, else the
/// first refusing limit (in order) records the refusal and the strike,
/// and nothing is counted. Returns the one-limit reply (its first
/// [`ONE_LIMIT`] integers: not `struck`, a stacked check is never
/// coalesced) of the limit that decided (the refusing one, else the one
/// with fewest remaining, the first of equals), then its 0-based index.
pub const STACKED_SCRIPT: &str = concat!(
    "-- pow-shield stacked limits (sliding-window log or counter) and circuit breaker",
    breaker_lua!(),
    approx_lua!(),
    r#"
local threshold, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
local after, ban = tonumber(ARGV[5]), tonumber(ARGV[6])
local approx = ARGV[7] == '1'
local n = (#ARGV - 7) / 2

local strikes, block, block_ms = breaker_status(KEYS[1], KEYS[2], threshold, after)
if block > 0 then return {0, 0, 0, 0, 0, strikes, block, block_ms, 0, 0} end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- Each limit as the one-limit scripts see it, nothing counted yet.
local seen = {}
local refusing = 0
for i = 1, n do
  local key = KEYS[2 + 2 * i]
  local limit, window = tonumber(ARGV[6 + 2 * i]), tonumber(ARGV[7 + 2 * i])
  local s = {window = window, retry = 0}
  if approx then
    local index, left, curr, prev, estimate = approx_read(key, window, now)
    s.index, s.left, s.curr, s.prev = index, left, curr, prev
    s.allowed = estimate < limit
    if s.allowed then
      s.remaining = math.max(limit - math.ceil(estimate + 1), 0)
      s.reset = left + window
    else
      s.remaining = math.max(limit - math.ceil(estimate), 0)
      s.reset = 0
      if curr > 0 then s.reset = left + window elseif prev > 0 then s.reset = left end
      s.retry = approx_retry(limit, window, left, curr, prev)
    end
  else
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
    local count = redis.call('ZCARD', key)
    local oldest
    if count > 0 then oldest = tonumber(redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')[2]) end
    s.allowed = count < limit
    if s.allowed then
      if count == 0 then oldest = now end
      s.remaining = math.max(limit - count - 1, 0)
    else
      s.remaining = 0
      local rank = count - limit
      local entry = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')[2]
      if entry then s.retry = math.max(tonumber(entry) + window - now, 0) end
    end
    s.reset = 0
    if oldest then s.reset = math.max(oldest + window - now, 0) end
  end
  seen[i] = s
  if not s.allowed and refusing == 0 then refusing = i end
end

if refusing == 0 then
  local tightest = 1
  for i = 1, n do
    local s, key = seen[i], KEYS[2 + 2 * i]
    if approx then
      redis.call('HSET', key, 'i', s.index, 'c', s.curr + 1, 'p', s.prev)
      redis.call('PEXPIRE', key, s.left + s.window)
    else
      redis.call('ZADD', key, now, ARGV[1])
      redis.call('PEXPIRE', key, ARGV[7 + 2 * i])
    end
    if s.remaining < seen[tightest].remaining then tightest = i end
  end
  -- A wait is taken back under the first limit that refused the client.
  if ARGV[2] == '1' then
    for i = 1, n do
      local was = strikes
      strikes = waited(KEYS[3 + 2 * i], KEYS[1], KEYS[3], strikes)
      if strikes ~= was then break end
    end
  end
  local s = seen[tightest]
  return {1, s.remaining, s.reset, 0, 0, strikes, 0, 0, 0, tightest - 1}
end

local s = seen[refusing]
local over = redis.call('INCR', KEYS[3 + 2 * refusing])
if over == 1 then redis.call('PEXPIRE', KEYS[3 + 2 * refusing], 2 * s.window) end
local tripped = 0
if ARGV[2] ~= '0' and threshold > 0 then
  strikes, tripped = strike(KEYS[1], KEYS[2], KEYS[3], threshold, ttl, after, ban, ARGV[2] == '1')
end
return {0, s.remaining, s.reset, s.retry, over, strikes, 0, 0, tripped, refusing - 1}
"#
);

/// Of the one-limit scripts' reply, the integers the stacked script
/// returns (all but the last, `struck`).
pub const ONE_LIMIT: usize = REPLY_LEN - 1;

/// Integers the stacked script returns.
pub const STACKED_REPLY_LEN: usize = ONE_LIMIT + 1;

/// Decodes the stacked script's reply for `limits`: the verdict of the
/// limit that decided, which `Verdict::limit` names.
pub fn stacked_verdict_from_reply(
    reply: &[i64],
    limits: &Limits,
) -> Result<(Verdict, BreakerStatus), ReplyError> {
    let [.., at] = fields::<STACKED_REPLY_LEN>(reply)?;
    let index = STACKED_REPLY_LEN - 1;
    let at = u8::try_from(at).map_err(|_| ReplyError::OutOfRange { index })?;
    let limit = limits
        .get(usize::from(at))
        .ok_or(ReplyError::OutOfRange { index })?;
    let mut one = [0i64; REPLY_LEN];
    one[..ONE_LIMIT].copy_from_slice(&reply[..ONE_LIMIT]);
    let (mut verdict, breaker) = verdict_from_reply(&one, limit)?;
    verdict.limit = at;
    Ok((verdict, breaker))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::RateLimit;

    fn limits() -> Limits {
        let mut limits = Limits::one(RateLimit {
            requests: 10,
            window_ms: 1_000,
        });
        limits
            .push(
                RateLimit {
                    requests: 1000,
                    window_ms: 3_600_000,
                },
                None,
            )
            .unwrap();
        limits
    }

    #[test]
    fn the_reply_names_the_limit_that_decided() {
        let (v, _) =
            stacked_verdict_from_reply(&[0, 0, 900, 900, 1, 1, 0, 0, 0, 0], &limits()).unwrap();
        assert_eq!((v.allowed, v.retry_after_ms, v.limit), (false, 900, 0));
        let (v, _) =
            stacked_verdict_from_reply(&[1, 990, 3_600_000, 0, 0, 0, 0, 0, 0, 1], &limits())
                .unwrap();
        assert_eq!((v.allowed, v.remaining, v.limit), (true, 990, 1));
    }

    #[test]
    fn a_reply_naming_no_limit_of_the_location_or_too_short_is_refused() {
        assert_eq!(
            stacked_verdict_from_reply(&[1, 5, 0, 0, 0, 0, 0, 0, 0, 2], &limits()),
            Err(ReplyError::OutOfRange { index: 9 })
        );
        assert!(stacked_verdict_from_reply(&[1, 5, 0, 0, 0, 0, 0, 0, 0], &limits()).is_err());
        assert_eq!(
            stacked_verdict_from_reply(&[1, 11, 0, 0, 0, 0, 0, 0, 0, 0], &limits()),
            Err(ReplyError::OutOfRange { index: 1 }),
            "more remaining than the limit it names"
        );
    }
}

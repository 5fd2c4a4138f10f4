//! Cluster mode's sliding-window log (SPEC §6): one atomic Lua script per
//! shielded request, run with `EVALSHA` (falling back to `EVAL` on
//! `NOSCRIPT`), and the decoding of its reply.

use sha1::{Digest, Sha1};

use super::{RateLimit, Verdict};

/// The sliding-window script. Reads Redis's own clock so every node agrees.
///
/// - `KEYS[1]`: the client's sorted set (score = admission ms, member unique).
/// - `ARGV[1]` limit, `ARGV[2]` window in ms, `ARGV[3]` unique member
///   ([`member`]).
///
/// Returns four integers, decoded by [`verdict_from_reply`]: `{allowed 0/1,
/// remaining, reset_after_ms, retry_after_ms}`. Safe under Redis 7's effects
/// replication: replicas receive the ZADD/ZREMRANGEBYSCORE, not `TIME`.
pub const SLIDING_WINDOW_SCRIPT: &str = r#"-- pow-shield sliding-window log (SPEC 6)
-- Memory: KEYS[1] holds at most ARGV[1] members, each the member text plus a
-- score (~16 bytes each while listpack-encoded, up to 128 entries; ~70 bytes
-- in a skiplist beyond), and expires one window after its newest entry.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- An entry admitted at t counts while now < t + window.
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local count = redis.call('ZCARD', key)

local allowed = 0
if count < limit then
  redis.call('ZADD', key, now, ARGV[3])
  -- Only on admission: the newest entry decides when the key is empty.
  redis.call('PEXPIRE', key, window)
  count = count + 1
  allowed = 1
end

-- ms until the entry at rank (0 = oldest) leaves the window
local function leaves_in(rank)
  local entry = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')
  if entry[2] == nil then return 0 end
  return math.max(tonumber(entry[2]) + window - now, 0)
end

-- Refused: a slot frees when the entry at rank count - limit leaves (the
-- oldest, unless the limit was lowered while entries were counted).
local retry_after = 0
if allowed == 0 then retry_after = leaves_in(count - limit) end
return {allowed, math.max(limit - count, 0), leaves_in(0), retry_after}
"#;

/// Number of integers the script returns.
pub const REPLY_LEN: usize = 4;

/// A script reply that does not have the expected shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// Not exactly [`REPLY_LEN`] integers.
    #[error("sliding-window script returned {len} integers, expected 4")]
    WrongLength {
        /// Integers received.
        len: usize,
    },
    /// A negative count or duration.
    #[error("sliding-window script returned a negative value at position {index}")]
    Negative {
        /// 0-based position in the reply.
        index: usize,
    },
    /// A value that cannot be what the script computes (flag not 0/1,
    /// remaining above the limit).
    #[error("sliding-window script returned an impossible value at position {index}")]
    OutOfRange {
        /// 0-based position in the reply.
        index: usize,
    },
}

/// Lower-case hex SHA-1 of [`SLIDING_WINDOW_SCRIPT`], the name `EVALSHA`
/// and `SCRIPT LOAD` use.
pub fn script_sha1() -> String {
    hex::encode(Sha1::digest(SLIDING_WINDOW_SCRIPT.as_bytes()))
}

/// A sorted-set member unique across nodes, workers and requests within
/// one millisecond: `node_id`, worker `pid` and a per-worker sequence
/// number, in hex. `node_id` must differ between nginx nodes (a random value
/// per worker start also covers pid reuse).
pub fn member(node_id: u64, pid: u32, seq: u64) -> String {
    format!("{node_id:x}:{pid:x}:{seq:x}")
}

/// Decodes the script's reply for `limit`.
pub fn verdict_from_reply(reply: &[i64], limit: RateLimit) -> Result<Verdict, ReplyError> {
    let [allowed, remaining, reset_after_ms, retry_after_ms] = fields(reply)?;
    let allowed = match allowed {
        0 => false,
        1 => true,
        _ => return Err(ReplyError::OutOfRange { index: 0 }),
    };
    let remaining = u32::try_from(remaining)
        .ok()
        .filter(|r| *r <= limit.requests)
        .ok_or(ReplyError::OutOfRange { index: 1 })?;
    Ok(Verdict {
        allowed,
        remaining,
        reset_after_ms,
        retry_after_ms,
    })
}

/// The reply as non-negative integers.
fn fields(reply: &[i64]) -> Result<[u64; REPLY_LEN], ReplyError> {
    let reply: &[i64; REPLY_LEN] = reply
        .try_into()
        .map_err(|_| ReplyError::WrongLength { len: reply.len() })?;
    let mut out = [0u64; REPLY_LEN];
    for (index, (dst, src)) in out.iter_mut().zip(reply).enumerate() {
        *dst = u64::try_from(*src).map_err(|_| ReplyError::Negative { index })?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PER_MINUTE_60: RateLimit = RateLimit {
        requests: 60,
        window_ms: 60_000,
    };

    #[test]
    fn admitted_reply_decodes_to_an_allowed_verdict() {
        let v = verdict_from_reply(&[1, 59, 60_000, 0], PER_MINUTE_60).unwrap();
        assert_eq!(
            v,
            Verdict {
                allowed: true,
                remaining: 59,
                reset_after_ms: 60_000,
                retry_after_ms: 0,
            }
        );
    }

    #[test]
    fn sixty_first_request_reply_decodes_to_rejected_with_retry_after() {
        let v = verdict_from_reply(&[0, 0, 12_345, 12_345], PER_MINUTE_60).unwrap();
        assert!(!v.allowed);
        assert_eq!(v.remaining, 0);
        assert_eq!(v.retry_after_ms, 12_345);
    }

    #[test]
    fn short_or_long_reply_is_an_error() {
        for reply in [
            &[][..],
            &[1, 59, 0],
            &[1, 59, 0, 0, 0],
            &[1, 59, 0, 0, 0, 0],
        ] {
            assert_eq!(
                verdict_from_reply(reply, PER_MINUTE_60),
                Err(ReplyError::WrongLength { len: reply.len() })
            );
        }
    }

    #[test]
    fn negative_value_is_an_error_naming_its_position() {
        assert_eq!(
            verdict_from_reply(&[1, 59, -1, 0], PER_MINUTE_60),
            Err(ReplyError::Negative { index: 2 })
        );
    }

    #[test]
    fn allowed_flag_other_than_0_or_1_is_an_error() {
        assert_eq!(
            verdict_from_reply(&[2, 59, 0, 0], PER_MINUTE_60),
            Err(ReplyError::OutOfRange { index: 0 })
        );
    }

    #[test]
    fn remaining_above_the_limit_is_an_error() {
        assert_eq!(
            verdict_from_reply(&[1, 61, 0, 0], PER_MINUTE_60),
            Err(ReplyError::OutOfRange { index: 1 })
        );
    }

    #[test]
    fn script_sha1_is_40_lower_case_hex_chars_and_stable() {
        let sha = script_sha1();
        assert_eq!(sha.len(), 40);
        assert!(sha
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_eq!(sha, script_sha1());
    }

    #[test]
    fn script_reads_redis_time_never_random() {
        assert!(SLIDING_WINDOW_SCRIPT.contains("redis.call('TIME')"));
        assert!(!SLIDING_WINDOW_SCRIPT.contains("math.random"));
    }

    #[test]
    fn members_differ_by_node_pid_and_sequence() {
        let base = member(1, 2, 3);
        assert_eq!(base, "1:2:3");
        assert_ne!(base, member(2, 2, 3));
        assert_ne!(base, member(1, 3, 3));
        assert_ne!(base, member(1, 2, 4));
        assert_ne!(member(0x12, 3, 4), member(0x1, 0x23, 4));
    }
}

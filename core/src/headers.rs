//! The numbers of the rate-limit headers (docs/protocol.md §2): what a
//! verdict made at `decided_at_ms` (epoch) says in `X-RateLimit-*` and the
//! IETF draft's `RateLimit`. The texts fixed per location are made at
//! configuration time; these are formatted per response.

use crate::limiter::{LimitName, Limits, Verdict};

/// The name of limit `i` in `RateLimit-Policy` and `RateLimit`: as before
/// limits stacked, `pow-shield` for a location's one unnamed limit; else
/// the limit's name.
pub fn item_name(limits: &Limits, i: usize) -> LimitName {
    if limits.is_plain() {
        LimitName::new("pow-shield").unwrap_or_else(|_| limits.name(i))
    } else {
        limits.name(i)
    }
}

/// One response's rate-limit numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimitNumbers {
    /// `X-RateLimit-Remaining`, `RateLimit: r=`.
    pub remaining: u32,
    /// `X-RateLimit-Reset`: epoch seconds at which the oldest counted
    /// request leaves the window, rounded up.
    pub reset_at_s: u64,
    /// `RateLimit: t=`: seconds until then, rounded up.
    pub reset_in_s: u64,
}

impl RateLimitNumbers {
    pub fn new(verdict: &Verdict, decided_at_ms: u64) -> Self {
        RateLimitNumbers {
            remaining: verdict.remaining,
            reset_at_s: decided_at_ms
                .saturating_add(verdict.reset_after_ms)
                .div_ceil(1000),
            reset_in_s: verdict.reset_after_ms.div_ceil(1000),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_are_rounded_up_to_whole_seconds() {
        let v = Verdict {
            allowed: true,
            remaining: 59,
            reset_after_ms: 59_001,
            retry_after_ms: 0,
            over: 0,
            limit: 0,
        };
        let n = RateLimitNumbers::new(&v, 1_700_000_000_500);
        assert_eq!(n.remaining, 59);
        assert_eq!(n.reset_at_s, 1_700_000_060);
        assert_eq!(n.reset_in_s, 60);
    }

    #[test]
    fn nothing_counted_resets_now() {
        let n = RateLimitNumbers::new(&Verdict::default(), 2_000);
        assert_eq!((n.reset_at_s, n.reset_in_s), (2, 0));
    }
}

//! The local-mode leaky bucket (docs/directives.md, pow_shield_limit): rate = requests/window,
//! burst = requests, like `limit_req`.
//!
//! Exact integer maths: one request costs `window_ms` units, the bucket
//! drains `requests` units per millisecond and holds `requests * window_ms`.
//! So 60 per minute admits 60 at once and then one more every second.
//! Arithmetic saturates; it is exact whenever `requests * window_ms` fits in
//! a `u64` (always, within `parse_limit`'s bounds).

use super::{RateLimit, Verdict};

/// One client's bucket. Plain data so it can live in nginx shared memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BucketState {
    /// Units in the bucket as of `last_ms`.
    pub level: u64,
    /// When `level` was last brought up to date.
    pub last_ms: u64,
    /// Refused requests, in the same units and draining at the same rate
    /// as `level`: how far beyond its limit the client keeps going.
    pub over: u64,
}

/// The bucket's shape for one limit, in units.
struct Shape {
    /// Units one request adds.
    cost: u64,
    /// Units drained per millisecond.
    drain: u64,
    /// Most units the bucket holds.
    capacity: u64,
}

impl Shape {
    fn of(limit: RateLimit) -> Shape {
        // A zero window is not a valid limit; treat it as 1 ms, never divide by 0.
        let cost = limit.window_ms.max(1);
        let drain = u64::from(limit.requests);
        Shape {
            cost,
            drain,
            capacity: drain.saturating_mul(cost),
        }
    }

    /// The level at `now_ms`. A clock that went backwards drains nothing.
    fn level_at(&self, state: &BucketState, now_ms: u64) -> u64 {
        self.drained(state.level, state, now_ms)
    }

    /// `units` as of `state.last_ms`, drained until `now_ms`.
    fn drained(&self, units: u64, state: &BucketState, now_ms: u64) -> u64 {
        let elapsed = now_ms.saturating_sub(state.last_ms);
        units.saturating_sub(elapsed.saturating_mul(self.drain))
    }

    /// Milliseconds until `units` have drained (`u64::MAX`: never).
    fn ms_to_drain(&self, units: u64) -> u64 {
        match (units, self.drain) {
            (0, _) => 0,
            (_, 0) => u64::MAX,
            (units, drain) => units.div_ceil(drain),
        }
    }
}

/// Admits one request if the bucket has room, and reports the headers'
/// values. A rejected request adds nothing; a limit of 0 requests admits
/// nothing.
pub fn admit(state: &mut BucketState, limit: RateLimit, now_ms: u64) -> Verdict {
    let shape = Shape::of(limit);
    let mut level = shape.level_at(state, now_ms);
    let mut over = shape.drained(state.over, state, now_ms);
    let allowed = shape.drain > 0 && level.saturating_add(shape.cost) <= shape.capacity;
    if allowed {
        level = level.saturating_add(shape.cost);
    } else {
        over = over.saturating_add(shape.cost);
    }
    state.level = level;
    state.over = over;
    // Never move last_ms backwards, or the same span would drain twice.
    state.last_ms = state.last_ms.max(now_ms);

    let room = shape.capacity.saturating_sub(level) / shape.cost;
    let retry_after_ms = if allowed {
        0
    } else {
        let excess = level
            .saturating_add(shape.cost)
            .saturating_sub(shape.capacity);
        shape.ms_to_drain(excess).max(1)
    };
    Verdict {
        allowed,
        remaining: u32::try_from(room).unwrap_or(u32::MAX),
        reset_after_ms: shape.ms_to_drain(level),
        retry_after_ms,
        over: u32::try_from(over.div_ceil(shape.cost)).unwrap_or(u32::MAX),
        limit: 0,
    }
}

/// Whether the bucket refused a request within about the last two
/// windows and no admission came since (one admitted after it waited the
/// refusal out: `store::check` takes its strike back). Read before the
/// request is counted: admitting drains what `over` held.
pub fn refused_lately(state: &BucketState, limit: RateLimit, now_ms: u64) -> bool {
    let window = limit.window_ms.max(1);
    state.over > 0 && now_ms.saturating_sub(state.last_ms) <= window.saturating_mul(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_count_as_over_and_drain_at_the_limit_rate() {
        let (mut state, _) = after(60, PER_MINUTE_60);
        let mut v = admit(&mut state, PER_MINUTE_60, T0);
        for _ in 0..119 {
            v = admit(&mut state, PER_MINUTE_60, T0);
        }
        assert_eq!(v.over, 120, "twice the limit refused within the window");
        // 30 s later, 30 of them have drained (one per second at 60/min).
        let later = admit(&mut state, PER_MINUTE_60, T0 + 30_000);
        assert!(later.allowed);
        assert_eq!(later.over, 90);
    }

    const T0: u64 = 1_711_929_570_000;
    const PER_MINUTE_60: RateLimit = RateLimit {
        requests: 60,
        window_ms: 60_000,
    };

    /// A bucket that has just admitted `n` requests at `T0`.
    fn after(n: u32, limit: RateLimit) -> (BucketState, Verdict) {
        let mut state = BucketState::default();
        let mut last = None;
        for _ in 0..n {
            last = Some(admit(&mut state, limit, T0));
        }
        (state, last.unwrap())
    }

    #[test]
    fn first_request_leaves_59_of_60_and_resets_in_1_second() {
        let (_, v) = after(1, PER_MINUTE_60);
        assert_eq!(
            v,
            Verdict {
                allowed: true,
                remaining: 59,
                reset_after_ms: 1_000,
                retry_after_ms: 0,
                over: 0,
                limit: 0,
            }
        );
    }

    #[test]
    fn sixty_per_minute_admits_60_at_once() {
        let (_, v) = after(60, PER_MINUTE_60);
        assert!(v.allowed);
        assert_eq!(v.remaining, 0);
        assert_eq!(v.reset_after_ms, 60_000);
    }

    #[test]
    fn sixty_first_request_is_rejected_with_retry_after_1000_ms() {
        let (mut state, _) = after(60, PER_MINUTE_60);
        let v = admit(&mut state, PER_MINUTE_60, T0);
        assert_eq!(
            v,
            Verdict {
                allowed: false,
                remaining: 0,
                reset_after_ms: 60_000,
                retry_after_ms: 1_000,
                over: 1,
                limit: 0,
            }
        );
    }

    #[test]
    fn rejected_request_does_not_fill_the_bucket() {
        let (mut state, _) = after(60, PER_MINUTE_60);
        let before = state.level;
        for _ in 0..10 {
            admit(&mut state, PER_MINUTE_60, T0);
        }
        assert_eq!(state.level, before);
    }

    #[test]
    fn one_more_is_admitted_after_1_second_and_only_one() {
        let (mut state, _) = after(60, PER_MINUTE_60);
        assert!(!admit(&mut state, PER_MINUTE_60, T0 + 999).allowed);
        assert!(admit(&mut state, PER_MINUTE_60, T0 + 1_000).allowed);
        let v = admit(&mut state, PER_MINUTE_60, T0 + 1_000);
        assert!(!v.allowed);
        assert_eq!(v.retry_after_ms, 1_000);
    }

    #[test]
    fn retry_after_counts_down_with_the_clock() {
        let (mut state, _) = after(60, PER_MINUTE_60);
        assert_eq!(
            admit(&mut state, PER_MINUTE_60, T0 + 400).retry_after_ms,
            600
        );
    }

    #[test]
    fn half_a_window_later_30_requests_are_available() {
        let (mut state, _) = after(60, PER_MINUTE_60);
        let v = admit(&mut state, PER_MINUTE_60, T0 + 30_000);
        assert!(v.allowed);
        assert_eq!(v.remaining, 29);
        assert_eq!(v.reset_after_ms, 31_000);
    }

    #[test]
    fn a_full_burst_drains_exactly_one_window_later() {
        // The zone forgets a bucket once reset_after_ms has passed.
        let (_, v) = after(60, PER_MINUTE_60);
        assert_eq!(v.reset_after_ms, 60_000);
    }

    #[test]
    fn full_drain_restores_all_60() {
        let (mut state, _) = after(60, PER_MINUTE_60);
        let v = admit(&mut state, PER_MINUTE_60, T0 + 60_000);
        assert!(v.allowed);
        assert_eq!(v.remaining, 59);
    }

    #[test]
    fn clock_going_backwards_grants_nothing_extra() {
        let (mut state, _) = after(60, PER_MINUTE_60);
        assert!(!admit(&mut state, PER_MINUTE_60, T0 - 10_000).allowed);
        assert!(!admit(&mut state, PER_MINUTE_60, T0 + 999).allowed);
        assert!(admit(&mut state, PER_MINUTE_60, T0 + 1_000).allowed);
    }

    #[test]
    fn bucket_on_the_monotonic_clock_drains_across_a_wall_clock_step_back() {
        // What the local store is given at two moments a second apart,
        // while the wall clock steps an hour back: the monotonic reading.
        let (wall_before, wall_after) = (T0, T0 - 3_600_000);
        let (mono_before, mono_after) = (7_000, 8_000);
        let (mut state, _) = after(60, PER_MINUTE_60);
        state.last_ms = mono_before;
        assert!(!admit(&mut state, PER_MINUTE_60, mono_before).allowed);
        assert!(admit(&mut state, PER_MINUTE_60, mono_after).allowed);

        // Fed the wall clock, the same bucket stays full for an hour.
        let (mut state, _) = after(60, PER_MINUTE_60);
        state.last_ms = wall_before;
        assert!(!admit(&mut state, PER_MINUTE_60, wall_after + 1_000).allowed);
    }

    #[test]
    fn clock_going_backwards_from_zero_does_not_panic() {
        let mut state = BucketState {
            level: u64::MAX,
            last_ms: u64::MAX,
            over: u64::MAX,
        };
        let v = admit(&mut state, PER_MINUTE_60, 0);
        assert!(!v.allowed);
    }

    #[test]
    fn u32_max_requests_per_day_do_not_overflow() {
        let limit = RateLimit {
            requests: u32::MAX,
            window_ms: 86_400_000,
        };
        let (mut state, v) = after(3, limit);
        assert_eq!(v.remaining, u32::MAX - 3);
        assert!(admit(&mut state, limit, u64::MAX).allowed);
    }

    #[test]
    fn one_request_per_ms_window_refills_every_ms() {
        let limit = RateLimit {
            requests: 1,
            window_ms: 1,
        };
        let mut state = BucketState::default();
        assert!(admit(&mut state, limit, T0).allowed);
        let v = admit(&mut state, limit, T0);
        assert!(!v.allowed);
        assert_eq!(v.retry_after_ms, 1);
        assert!(admit(&mut state, limit, T0 + 1).allowed);
    }

    #[test]
    fn one_request_per_day_waits_a_day() {
        let limit = RateLimit {
            requests: 1,
            window_ms: 86_400_000,
        };
        let mut state = BucketState::default();
        assert!(admit(&mut state, limit, T0).allowed);
        assert_eq!(admit(&mut state, limit, T0).retry_after_ms, 86_400_000);
    }

    #[test]
    fn absurd_limits_saturate_instead_of_panicking() {
        for limit in [
            RateLimit {
                requests: u32::MAX,
                window_ms: u64::MAX,
            },
            RateLimit {
                requests: 1,
                window_ms: 0,
            },
            RateLimit {
                requests: 0,
                window_ms: 60_000,
            },
        ] {
            let mut state = BucketState::default();
            admit(&mut state, limit, T0);
            admit(&mut state, limit, u64::MAX);
            admit(&mut state, limit, 0);
        }
    }

    #[test]
    fn zero_requests_admit_nothing() {
        let limit = RateLimit {
            requests: 0,
            window_ms: 60_000,
        };
        let v = admit(&mut BucketState::default(), limit, T0);
        assert!(!v.allowed);
        assert_eq!(v.remaining, 0);
        assert_eq!(v.reset_after_ms, 0);
        assert_eq!(v.retry_after_ms, u64::MAX);
    }
}

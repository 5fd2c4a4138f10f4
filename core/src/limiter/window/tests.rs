//! The window's behaviour as a table (fake clock), and against the exact
//! log of cluster mode over the same requests.

use super::*;

const T0: u64 = 1_711_929_570_000;
const PER_MINUTE_60: RateLimit = RateLimit {
    requests: 60,
    window_ms: 60_000,
};
/// A slot of `PER_MINUTE_60`: 60 s / 15.
const SLOT_MS: u64 = 4_000;

/// A window that has just admitted `n` requests at `T0`.
fn after(n: u32, limit: RateLimit) -> (SlidingWindow, Verdict) {
    let mut state = SlidingWindow::default();
    let mut last = Verdict::default();
    for _ in 0..n {
        last = admit(&mut state, limit, T0);
    }
    (state, last)
}

/// (allowed, remaining, reset ms, retry ms) of one more request at `at`.
fn headers(state: &mut SlidingWindow, at: u64) -> (bool, u32, u64, u64) {
    let v = admit(state, PER_MINUTE_60, at);
    (v.allowed, v.remaining, v.reset_after_ms, v.retry_after_ms)
}

#[test]
fn issue_26_ten_seconds_after_60_quick_requests_is_refused_for_50_more() {
    // 60 requests within 300 ms, then one 10 s after the first: cluster
    // mode's log answers 429, Remaining 0, Retry-After 50 s.
    let mut state = SlidingWindow::default();
    for i in 0..60 {
        assert!(admit(&mut state, PER_MINUTE_60, T0 + i * 5).allowed);
    }
    let v = admit(&mut state, PER_MINUTE_60, T0 + 10_000);
    assert!(!v.allowed);
    assert_eq!(v.remaining, 0);
    let exact = 50_000;
    assert!(
        (exact..exact + 300).contains(&v.retry_after_ms),
        "{v:?}: the log's 50 s, later by at most the burst's length"
    );
    assert!((exact..exact + 300).contains(&v.reset_after_ms), "{v:?}");
}

#[test]
fn sixty_per_minute_as_a_table() {
    // at (ms after T0), allowed, remaining, reset, retry: one request a
    // second from T0 to T0 + 59 s, then what the window says.
    let mut state = SlidingWindow::default();
    for s in 0..60 {
        let v = admit(&mut state, PER_MINUTE_60, T0 + s * 1_000);
        assert_eq!((v.allowed, v.remaining), (true, 59 - s as u32), "at {s} s");
    }
    // The edge slot holds T0's slot's requests: they count until the last
    // of them leaves, so at T0 + 60 s (where the log admits one) the ring
    // refuses for less than one slot width more.
    let slot_end = T0 - T0 % SLOT_MS + SLOT_MS;
    let last_in_first_slot = T0 + (slot_end - T0 - 1) / 1_000 * 1_000;
    let first_free = last_in_first_slot + 60_000;
    let table = [
        // (at, allowed, remaining, reset_after, retry_after)
        (
            T0 + 60_000,
            false,
            0,
            first_free - T0 - 60_000,
            first_free - T0 - 60_000,
        ),
        (first_free - 1, false, 0, 1, 1),
    ];
    for (at, allowed, remaining, reset, retry) in table {
        assert_eq!(
            headers(&mut state, at),
            (allowed, remaining, reset, retry),
            "at T0 + {} ms",
            at - T0
        );
    }
    assert!(
        first_free - (T0 + 60_000) < SLOT_MS,
        "within one slot width"
    );
    let v = admit(&mut state, PER_MINUTE_60, first_free);
    assert!(v.allowed, "{v:?}");
}

#[test]
fn first_request_leaves_59_of_60_and_resets_in_a_window() {
    let (_, v) = after(1, PER_MINUTE_60);
    assert_eq!(
        v,
        Verdict {
            allowed: true,
            remaining: 59,
            reset_after_ms: 60_000,
            retry_after_ms: 0,
            over: 0,
            limit: 0,
        }
    );
}

#[test]
fn sixty_first_request_at_once_waits_the_whole_window() {
    let (mut state, v) = after(60, PER_MINUTE_60);
    assert_eq!(
        (v.allowed, v.remaining, v.reset_after_ms),
        (true, 0, 60_000)
    );
    let v = admit(&mut state, PER_MINUTE_60, T0);
    assert_eq!(
        v,
        Verdict {
            allowed: false,
            remaining: 0,
            reset_after_ms: 60_000,
            retry_after_ms: 60_000,
            over: 1,
            limit: 0,
        }
    );
}

#[test]
fn no_refill_before_the_window_has_passed() {
    // The leaky bucket let one more in every second; the window none.
    let (mut state, _) = after(60, PER_MINUTE_60);
    for at in [1_000, 10_000, 30_000, 59_999] {
        let v = admit(&mut state, PER_MINUTE_60, T0 + at);
        assert_eq!(
            (v.allowed, v.remaining, v.retry_after_ms),
            (false, 0, 60_000 - at),
            "at T0 + {at} ms"
        );
    }
    let v = admit(&mut state, PER_MINUTE_60, T0 + 60_000);
    assert_eq!((v.allowed, v.remaining), (true, 59), "all 60 back at once");
}

#[test]
fn a_refused_request_adds_nothing() {
    let (mut state, _) = after(60, PER_MINUTE_60);
    let counts = state.count;
    for _ in 0..10 {
        admit(&mut state, PER_MINUTE_60, T0);
    }
    assert_eq!(state.count, counts);
}

#[test]
fn refusals_count_as_over_until_two_windows_after_the_first() {
    // As cluster mode's refusals key: INCRBY, expiring two windows after
    // the first refusal it counts (a client waiting out its Retry-After
    // finds its refusal still counted).
    let (mut state, _) = after(60, PER_MINUTE_60);
    let mut v = Verdict::default();
    for _ in 0..120 {
        v = admit(&mut state, PER_MINUTE_60, T0);
    }
    assert_eq!(v.over, 120, "twice the limit refused within the window");
    assert_eq!(admit(&mut state, PER_MINUTE_60, T0 + 30_000).over, 121);
    assert_eq!(admit(&mut state, PER_MINUTE_60, T0 + 59_999).over, 122);
    let v = admit(&mut state, PER_MINUTE_60, T0 + 60_000);
    assert_eq!(
        (v.allowed, v.over),
        (true, 122),
        "admitted: the refusals still count (the next challenge's price)"
    );
    for _ in 0..59 {
        admit(&mut state, PER_MINUTE_60, T0 + 60_000);
    }
    assert_eq!(admit(&mut state, PER_MINUTE_60, T0 + 60_000).over, 123);
    for _ in 0..60 {
        admit(&mut state, PER_MINUTE_60, T0 + 120_000);
    }
    assert_eq!(
        admit(&mut state, PER_MINUTE_60, T0 + 120_000).over,
        1,
        "a new count of refusals"
    );
}

#[test]
fn the_entry_is_kept_until_the_newest_request_leaves() {
    // Reset is the oldest's; the zone must keep the window until the newest.
    let (mut state, _) = after(30, PER_MINUTE_60);
    let v = admit(&mut state, PER_MINUTE_60, T0 + 20_000);
    assert_eq!(v.reset_after_ms, 40_000, "the oldest leaves at T0 + 60 s");
    assert_eq!(state.keep_until_ms(PER_MINUTE_60), T0 + 80_000);
}

#[test]
fn refusals_keep_the_entry_for_their_window() {
    let (mut state, _) = after(60, PER_MINUTE_60);
    admit(&mut state, PER_MINUTE_60, T0 + 50_000);
    assert_eq!(state.keep_until_ms(PER_MINUTE_60), T0 + 170_000);
}

#[test]
fn a_lowered_limit_waits_until_the_count_is_under_it() {
    // 20 at T0, 20 at T0 + 20 s, then the limit is 30: the log's entry at
    // rank count − limit (10, of T0) leaves at T0 + 60 s... leaving 20.
    let mut state = SlidingWindow::default();
    for at in [T0, T0 + 20_000] {
        for _ in 0..20 {
            admit(&mut state, PER_MINUTE_60, at);
        }
    }
    let thirty = RateLimit {
        requests: 30,
        ..PER_MINUTE_60
    };
    let v = admit(&mut state, thirty, T0 + 30_000);
    assert_eq!(
        (v.allowed, v.remaining, v.retry_after_ms),
        (false, 0, 30_000)
    );
}

#[test]
fn clock_going_backwards_grants_nothing_extra() {
    let (mut state, _) = after(60, PER_MINUTE_60);
    assert!(!admit(&mut state, PER_MINUTE_60, T0 - 10_000).allowed);
    assert!(!admit(&mut state, PER_MINUTE_60, T0 - 100_000_000).allowed);
    assert!(!admit(&mut state, PER_MINUTE_60, T0 + 59_999).allowed);
    assert!(admit(&mut state, PER_MINUTE_60, T0 + 60_000).allowed);
}

#[test]
fn window_on_the_monotonic_clock_frees_across_a_wall_clock_step_back() {
    // What the local store is given a window apart while the wall clock
    // steps an hour back: the monotonic reading.
    let (mono_before, mono_after) = (7_000, 67_000);
    let mut state = SlidingWindow::default();
    for _ in 0..60 {
        admit(&mut state, PER_MINUTE_60, mono_before);
    }
    assert!(admit(&mut state, PER_MINUTE_60, mono_after).allowed);

    // Fed the wall clock, the same window stays full for an hour.
    let (mut state, _) = after(60, PER_MINUTE_60);
    assert!(!admit(&mut state, PER_MINUTE_60, T0 - 3_600_000 + 60_000).allowed);
}

#[test]
fn a_long_pause_empties_the_ring() {
    let (mut state, _) = after(60, PER_MINUTE_60);
    let v = admit(&mut state, PER_MINUTE_60, T0 + 10 * 60_000);
    assert_eq!(
        (v.allowed, v.remaining, v.reset_after_ms),
        (true, 59, 60_000)
    );
}

#[test]
fn one_request_per_second_is_exact() {
    // One request per slot is kept to the millisecond.
    let limit = RateLimit {
        requests: 1,
        window_ms: 1_000,
    };
    let mut state = SlidingWindow::default();
    assert!(admit(&mut state, limit, T0 + 7).allowed);
    let v = admit(&mut state, limit, T0 + 500);
    assert_eq!(
        (v.allowed, v.retry_after_ms, v.reset_after_ms),
        (false, 507, 507)
    );
    assert!(!admit(&mut state, limit, T0 + 1_006).allowed);
    assert!(admit(&mut state, limit, T0 + 1_007).allowed);
}

#[test]
fn one_request_per_day_waits_a_day() {
    let limit = RateLimit {
        requests: 1,
        window_ms: 86_400_000,
    };
    let mut state = SlidingWindow::default();
    assert!(admit(&mut state, limit, T0).allowed);
    assert_eq!(admit(&mut state, limit, T0).retry_after_ms, 86_400_000);
}

#[test]
fn a_million_per_second_counts_every_request() {
    // parse_limit's largest: slot counts are 32-bit.
    let limit = RateLimit {
        requests: 1_000_000,
        window_ms: 1_000,
    };
    let mut state = SlidingWindow::default();
    for i in 0..1_000_000u64 {
        assert!(admit(&mut state, limit, T0 + i / 1_000).allowed);
    }
    let v = admit(&mut state, limit, T0 + 999);
    assert_eq!((v.allowed, v.remaining), (false, 0));
}

#[test]
fn zero_requests_admit_nothing() {
    let limit = RateLimit {
        requests: 0,
        window_ms: 60_000,
    };
    let v = admit(&mut SlidingWindow::default(), limit, T0);
    assert_eq!(
        (v.allowed, v.remaining, v.reset_after_ms, v.retry_after_ms),
        (false, 0, 0, u64::MAX)
    );
}

#[test]
fn absurd_limits_and_clocks_saturate_instead_of_panicking() {
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
        PER_MINUTE_60,
    ] {
        let mut state = SlidingWindow::default();
        for at in [T0, u64::MAX, 0, T0] {
            admit(&mut state, limit, at);
            state.keep_until_ms(limit);
        }
        let mut junk = SlidingWindow {
            period: u64::MAX,
            over_until_ms: u64::MAX,
            over: u32::MAX,
            total: u32::MAX,
            holds_until_ms: u64::MAX,
            count: [u32::MAX; SLOTS],
            last: [u32::MAX; SLOTS],
        };
        admit(&mut junk, limit, 0);
        admit(&mut junk, limit, u64::MAX);
        junk.keep_until_ms(limit);
    }
}

/// Cluster mode's log over the requests the ring admitted.
#[derive(Default)]
struct ExactLog(Vec<u64>);

impl ExactLog {
    /// (count, reset_after, retry_after) at `now`, as the window script.
    fn at(&mut self, limit: RateLimit, now: u64) -> (u64, u64, u64) {
        self.0.retain(|&t| t + limit.window_ms > now);
        let count = self.0.len() as u64;
        let reset = self.0.first().map_or(0, |t| t + limit.window_ms - now);
        let rank = (count + 1).saturating_sub(u64::from(limit.requests)) as usize;
        let retry = match rank {
            r if r >= 1 => self.0[r - 1] + limit.window_ms - now,
            _ => 0,
        };
        (count, reset, retry)
    }
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

#[test]
fn against_the_exact_log_never_more_and_late_by_under_one_slot() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for limit in [
        PER_MINUTE_60,
        RateLimit {
            requests: 5,
            window_ms: 10_000,
        },
        RateLimit {
            requests: 1,
            window_ms: 1_000,
        },
        RateLimit {
            requests: 100,
            window_ms: 3_600_000,
        },
    ] {
        let width = limit.window_ms.div_ceil(SLOTS as u64 - 1);
        let (mut ring, mut log) = (SlidingWindow::default(), ExactLog::default());
        let mut now = T0;
        for _ in 0..20_000 {
            // Bursts, pauses and steady trickles.
            now += match rng.below(4) {
                0 => 0,
                1 => rng.below(width),
                2 => rng.below(limit.window_ms / u64::from(limit.requests) * 2 + 1),
                _ => rng.below(limit.window_ms),
            };
            let (count, reset, retry) = log.at(limit, now);
            let v = admit(&mut ring, limit, now);
            let exact_admits = count < u64::from(limit.requests);
            assert!(exact_admits || !v.allowed, "never more than the log");
            assert!(
                u64::from(v.remaining)
                    <= u64::from(limit.requests) - count.min(limit.requests.into())
            );
            if v.allowed {
                log.0.push(now);
            } else if exact_admits {
                assert!(v.retry_after_ms < width, "refused {v:?} under one slot");
            } else {
                assert!(
                    (retry..retry + width).contains(&v.retry_after_ms),
                    "{v:?} vs {retry}"
                );
            }
            if count > 0 {
                assert!(
                    (reset..reset + width).contains(&v.reset_after_ms),
                    "{v:?} vs {reset}"
                );
            }
        }
    }
}

#[test]
fn stepping_through_the_slots_counts_as_working_each_one_out() {
    // `counted`'s fast path against the slot-by-slot one, over windows
    // written by many requests at uneven times, and read at many times.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for (requests, window_ms) in [(5, 1_000), (60, 60_000), (1_000_000, 1_000), (3, 7)] {
        let limit = RateLimit {
            requests,
            window_ms,
        };
        let grid = Grid::of(limit);
        let mut state = SlidingWindow::default();
        let mut now = next() % 1_000_000;
        for _ in 0..2_000 {
            now += next() % (window_ms / 8 + 2);
            admit(&mut state, limit, now);
            let at = now + next() % (window_ms * 2);
            let (mut fast, mut slow) = (state, state);
            let period = (at / grid.width).max(state.period);
            fast.advance(period);
            slow.advance(period);
            assert_eq!(
                fast.counted_afresh(grid, at),
                slow.counted_slot_by_slot(grid, at)
            );
            assert_eq!(fast, slow);
        }
        // Any bytes are a window (shared memory): the same for those.
        for _ in 0..2_000 {
            let period = match next() % 4 {
                0 => next() % (2 * SLOTS as u64),
                1 => next() >> (next() % 64),
                _ => SLOTS as u64 + next() % 1_000_000,
            };
            let mut any = SlidingWindow {
                period,
                ..SlidingWindow::default()
            };
            for i in 0..SLOTS {
                any.count[i] = (next() % 3) as u32;
                any.last[i] = (next() % (grid.width * 2 + 1)) as u32;
            }
            any.total = any.count.iter().sum();
            let at = match next() % 4 {
                0 => next() >> (next() % 64),
                _ => grid
                    .start(period)
                    .saturating_add(next() % (3 * grid.window))
                    .saturating_sub(grid.window),
            };
            let (mut fast, mut slow) = (any, any);
            assert_eq!(
                fast.counted_afresh(grid, at),
                slow.counted_slot_by_slot(grid, at)
            );
            assert_eq!(fast, slow);
        }
    }
}

/// The ring's sum, as the running total must say.
fn ring_sum(state: &SlidingWindow) -> u32 {
    state.count.iter().sum()
}

#[test]
fn the_total_stays_the_rings_sum_through_rotations_and_long_gaps() {
    let mut rng = Rng(0x51_7cc1_b727_220a);
    for limit in [
        PER_MINUTE_60,
        RateLimit {
            requests: 3,
            window_ms: 7,
        },
        RateLimit {
            requests: 1_000_000,
            window_ms: 1_000,
        },
    ] {
        let mut state = SlidingWindow::default();
        let mut now = T0;
        for step in 0..20_000 {
            // Bursts, one slot on, a few slots on, and gaps of a window
            // and more (the whole ring emptied at once).
            now += match rng.below(5) {
                0 => 0,
                1 => rng.below(limit.window_ms / 15 + 1),
                2 => rng.below(limit.window_ms / 2 + 1),
                3 => limit.window_ms + rng.below(3 * limit.window_ms),
                _ => 1,
            };
            // Now and then a clock that goes back (it frees nothing).
            let at = match step % 97 {
                0 => now.saturating_sub(rng.below(limit.window_ms)),
                _ => now,
            };
            admit(&mut state, limit, at);
            assert_eq!(state.total, ring_sum(&state), "after admit at step {step}");
            let _ = counted_at(&state, limit, at + rng.below(2 * limit.window_ms));
            assert_eq!(state.total, ring_sum(&state), "a read changes nothing");
        }
    }
}

#[test]
fn a_window_kept_across_a_reload_counts_on_from_its_total() {
    // A reload adopts the zone as it is (same layout): the window's bytes,
    // total included, carry on where they were.
    let (mut before, _) = after(40, PER_MINUTE_60);
    let adopted: SlidingWindow = before;
    let mut adopted = adopted;
    let at = T0 + SLOT_MS;
    assert_eq!(
        admit(&mut before, PER_MINUTE_60, at),
        admit(&mut adopted, PER_MINUTE_60, at)
    );
    assert_eq!(adopted.total, 41);
    assert_eq!(headers(&mut adopted, at).1, 18);
}

#[test]
fn a_total_at_odds_with_its_ring_heals_once_the_ring_empties() {
    // Bytes that disagree with themselves (never written so, but any bytes
    // are a window): no panic, and from the first request after a
    // window's gap the total is the ring's again.
    for total in [0, 7, u32::MAX] {
        let (mut state, _) = after(10, PER_MINUTE_60);
        state.total = total;
        admit(&mut state, PER_MINUTE_60, T0 + 1);
        let later = T0 + 2 * 60_000;
        let v = admit(&mut state, PER_MINUTE_60, later);
        assert_eq!((v.allowed, v.remaining), (true, 59));
        assert_eq!(state.total, ring_sum(&state));
    }
    // The slot-by-slot path works the total out from the ring.
    let (mut state, _) = after(10, PER_MINUTE_60);
    state.total = 3;
    state.last[state.slot(0)] = u32::MAX;
    let v = admit(&mut state, PER_MINUTE_60, T0 + 1);
    assert_eq!(v.remaining, 49);
    assert_eq!(state.total, 11);
}

#[test]
fn admitting_and_keeping_says_what_admit_then_keep_until_say() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for limit in [
        PER_MINUTE_60,
        RateLimit {
            requests: 2,
            window_ms: 1_000,
        },
    ] {
        let (mut a, mut b) = (SlidingWindow::default(), SlidingWindow::default());
        let mut now = T0;
        for _ in 0..10_000 {
            now += rng.below(limit.window_ms / 4);
            let (verdict, keep) = admit_keeping(&mut a, limit, now);
            assert_eq!(verdict, admit(&mut b, limit, now));
            assert_eq!(keep, b.keep_until_ms(limit));
            assert_eq!(a, b);
        }
    }
}

#[test]
fn the_slots_not_empty_are_found_oldest_first_whatever_the_period() {
    for period in [0u64, 1, 15, 16, 17, 31, 1_000_003, u64::MAX] {
        for pattern in [0u32, 1, 0x8001, 0xa5a5, 0xffff, 0x0f0f, 0x4000] {
            let mut state = SlidingWindow {
                period,
                ..SlidingWindow::default()
            };
            for i in 0..SLOTS {
                state.count[i] = (pattern >> i) & 1;
            }
            let looked_at_one_by_one = (0..SLOTS)
                .filter(|&age| state.count[state.slot(age)] != 0)
                .fold(0u16, |m, age| m | (1 << (SLOTS - 1 - age)));
            assert_eq!(
                state.occupied_oldest_first(),
                looked_at_one_by_one,
                "{period} {pattern:#x}"
            );
        }
    }
}

mod holds;

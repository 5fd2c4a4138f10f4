//! `holds_until_ms`: a count that trusts nothing leaving before it
//! answers as a count worked out afresh, over a table of sequences.

use super::*;

/// Each step's clock (ms) on the limit's slots: `(period, offset)`.
type Steps = &'static [(u64, u64)];

/// One request of each kind at `at` on both windows (the hint kept on
/// `kept`, forgotten on `afresh` before each), and everything they say
/// compared; the windows' bytes too, the hint aside.
fn same_answers(kept: &mut SlidingWindow, afresh: &mut SlidingWindow, limit: RateLimit, at: u64) {
    let what = format!("{limit:?} at {at}");
    afresh.holds_until_ms = 0;
    assert_eq!(
        counted_at(kept, limit, at),
        counted_at(afresh, limit, at),
        "read, {what}"
    );
    for room in [2, 1] {
        let (mut k, mut a) = (*kept, *afresh);
        a.holds_until_ms = 0;
        let within = (
            admit_within(&mut k, limit, at, room),
            admit_within(&mut a, limit, at, room),
        );
        assert_eq!(within.0, within.1, "room {room}, {what}");
    }
    afresh.holds_until_ms = 0;
    let answers = (
        admit_keeping(kept, limit, at),
        admit_keeping(afresh, limit, at),
    );
    assert_eq!(answers.0, answers.1, "{what}");
    assert_eq!(
        SlidingWindow {
            holds_until_ms: 0,
            ..*kept
        },
        SlidingWindow {
            holds_until_ms: 0,
            ..*afresh
        },
        "{what}"
    );
}

#[test]
fn a_count_trusting_nothing_leaves_before_its_hint_answers_as_one_afresh() {
    // Limits: one a minute, three in 7 ms (width 1), 60 a minute (width
    // 4 s), a busy one (width 67 ms), none at all.
    let limits = [
        RateLimit {
            requests: 1,
            window_ms: 60_000,
        },
        RateLimit {
            requests: 3,
            window_ms: 7,
        },
        PER_MINUTE_60,
        RateLimit {
            requests: 1_000_000,
            window_ms: 1_000,
        },
        RateLimit {
            requests: 0,
            window_ms: 1_000,
        },
    ];
    // Periods and offsets within them (offsets of a width and more run
    // into the next slots): slot boundaries on both sides, the window's
    // end (15 widths on: the edge slot's requests leave), a clock that
    // goes back within a period and across periods, long gaps.
    #[rustfmt::skip]
    let tables: &[Steps] = &[
        &[(20, 0), (20, 0), (20, 1), (21, 0), (35, 0), (35, 1), (36, 0)],
        &[(20, 0), (34, 999_999), (35, 0), (35, 0), (36, 0), (50, 0)],
        &[(16, 5), (16, 2), (16, 9), (15, 0), (31, 4), (31, 9), (32, 0)],
        &[(100, 0), (101, 0), (102, 0), (115, 0), (116, 0), (117, 0)],
        &[(0, 0), (1, 0), (14, 0), (15, 0), (16, 0), (40, 0), (40, 0)],
    ];
    for limit in limits {
        let width = Grid::of(limit).width;
        for steps in tables {
            let (mut kept, mut afresh) = (SlidingWindow::default(), SlidingWindow::default());
            for &(period, offset) in steps.iter() {
                for _ in 0..3 {
                    let at = T0 - T0 % width + period * width + offset.min(width * 3);
                    same_answers(&mut kept, &mut afresh, limit, at);
                }
            }
        }
    }
}

#[test]
fn random_runs_answer_alike_with_and_without_the_hint() {
    let mut rng = Rng(0x0ddb_a11c_afe0_f00d);
    for limit in [
        PER_MINUTE_60,
        RateLimit {
            requests: 1,
            window_ms: 1_000,
        },
        RateLimit {
            requests: 5,
            window_ms: 15,
        },
        RateLimit {
            requests: 40,
            window_ms: 1_000,
        },
    ] {
        let (mut kept, mut afresh) = (SlidingWindow::default(), SlidingWindow::default());
        let mut now = T0;
        for step in 0..5_000 {
            now += match rng.below(4) {
                0 => 0,
                1 => rng.below(limit.window_ms / 15 + 2),
                2 => rng.below(limit.window_ms / 3 + 2),
                _ => rng.below(2 * limit.window_ms),
            };
            let at = match step % 13 {
                0 => now.saturating_sub(rng.below(limit.window_ms)),
                _ => now,
            };
            same_answers(&mut kept, &mut afresh, limit, at);
        }
    }
}

#[test]
fn a_steady_clients_window_knows_until_when_nothing_leaves() {
    // One request every 10 ms under 1,000,000 a second: every slot holds
    // some, and each request of a period after the first finds the hint.
    let limit = RateLimit {
        requests: 1_000_000,
        window_ms: 1_000,
    };
    let mut state = SlidingWindow::default();
    for i in 0..300 {
        admit(&mut state, limit, T0 + i * 10);
    }
    let now = T0 + 2_990;
    assert!(state.holds_until_ms > now, "{state:?}");
    // The oldest slot's requests leave then: nothing is counted less
    // before it, and something is at it.
    let (counted, _) = counted_at(&state, limit, state.holds_until_ms - 1);
    assert_eq!(u64::from(counted), u64::from(state.total));
    let (after, _) = counted_at(&state, limit, state.holds_until_ms);
    assert!(after < counted);
}

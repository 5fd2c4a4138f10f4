//! The straight path (`decision::straight`) answers as the decision does:
//! over runs of requests against the in-memory store (the zone's order of
//! steps), every request it admits the full decision admits with the same
//! verdict, counted alike; every one it leaves to the full path, it
//! counted nothing of.

use super::*;
use crate::decision::straight::Straight;
use crate::limiter::window::{admit_keeping, SlidingWindow};

const LIMIT_3: RateLimit = RateLimit {
    requests: 3,
    window_ms: 1_000,
};

/// Bursts, gaps shorter and longer than the window, a clock that waits
/// out refusals and one that comes back to an empty window.
const TIMES: [u64; 22] = [
    0, 1, 2, 3, 4, 300, 999, 1_000, 1_001, 1_002, 1_003, 1_500, 1_999, 2_000, 2_100, 2_101, 2_102,
    2_103, 3_400, 9_000, 9_001, 9_002,
];

/// Every limit the straight path is tried with: 1 and 2 (where paying
/// ahead leaves it few or no requests), and 3.
const LIMITS: [RateLimit; 3] = [
    RateLimit {
        requests: 1,
        window_ms: 1_000,
    },
    RateLimit {
        requests: 2,
        window_ms: 1_000,
    },
    LIMIT_3,
];

fn straight_rules() -> Vec<Rules> {
    let mut out = Vec::new();
    for (pay_ahead, strikes, limit) in [(false, false), (true, false), (false, true), (true, true)]
        .into_iter()
        .flat_map(|(p, s)| LIMITS.map(|l| (p, s, l)))
    {
        let base = rules();
        out.push(Rules {
            limits: Limits::one(limit),
            pay_ahead,
            breaker: BreakerRules {
                strikes: base.breaker.strikes.filter(|_| strikes),
                ..base.breaker
            },
            ..base
        });
    }
    out
}

/// The client's one window in the store (a fresh one before its first).
fn window_of(store: &MemoryStore) -> SlidingWindow {
    store.buckets.values().next().copied().unwrap_or_default()
}

#[test]
fn straight_path_admits_as_the_decision_and_counts_nothing_it_leaves() {
    let (mut straight_taken, mut left) = (0, 0);
    for rules in straight_rules() {
        // (A limit of 1 with pay-ahead has none: the table test below.)
        let Some(straight) = Straight::of(&rules) else {
            assert!(rules.pay_ahead && rules.limits.as_slice()[0].rate.requests == 1);
            continue;
        };
        let limit = straight.limit;
        let mut s = FakeStore::default();
        for (n, t) in TIMES.iter().copied().enumerate() {
            s.store.at(t);
            // The module's own conditions: a client the zone has a
            // breaker for takes the full path.
            let has_breaker = s.store.breakers.contains_key(&b"a"[..]);
            let before = window_of(&s.store);
            let mut tried = before;
            let taken = match has_breaker {
                true => None,
                false => straight.admit(&mut tried, t),
            };
            let done = s.request("a", rules, Payment::Unpaid, false);
            let after = window_of(&s.store);
            let at = format!("{rules:?} request {n} at {t}");
            match taken {
                Some((verdict, keep_until_ms)) => {
                    straight_taken += 1;
                    assert_eq!(Straight::decided(verdict), done, "{at}");
                    assert_eq!(tried, after, "{at}: counted alike");
                    assert_eq!(keep_until_ms, after.keep_until_ms(limit), "{at}");
                }
                None => {
                    left += 1;
                    // Tried or not, the window admits as it would have.
                    let (mut was, mut now) = (before, tried);
                    assert_eq!(
                        admit_keeping(&mut was, limit, t),
                        admit_keeping(&mut now, limit, t),
                        "{at}"
                    );
                    assert_eq!(was, now, "{at}");
                }
            }
        }
    }
    assert!(straight_taken > 0 && left > 0, "{straight_taken} {left}");
}

#[test]
fn only_a_plain_local_limit_has_a_straight_path() {
    let plain = Rules {
        limits: Limits::one(LIMIT_3),
        ..rules()
    };
    assert!(Straight::of(&plain).is_some());
    let mut two = plain.limits;
    let _ = two.push(LIMIT_2, None);
    let refused = [
        Rules {
            trap: true,
            ..plain
        },
        Rules {
            dry_run: true,
            ..plain
        },
        Rules {
            limits: two,
            ..plain
        },
        Rules {
            limits: Limits::NONE,
            ..plain
        },
    ];
    for rules in refused {
        assert_eq!(Straight::of(&rules), None, "{rules:?}");
    }
}

#[test]
fn straight_path_leaves_the_last_free_request_to_the_decision_when_paying_ahead() {
    let ahead = Rules {
        limits: Limits::one(LIMIT_3),
        pay_ahead: true,
        ..rules()
    };
    let straight = Straight::of(&ahead).expect("straight");
    let mut window = SlidingWindow::default();
    let remaining: Vec<_> = (0..4)
        .map(|t| straight.admit(&mut window, t).map(|(v, _)| v.remaining))
        .collect();
    // The third request, the last free one, carries a priced challenge.
    assert_eq!(remaining, [Some(2), Some(1), None, None]);
    let no_ahead = Straight::of(&Rules {
        pay_ahead: false,
        ..ahead
    })
    .expect("straight");
    let mut window = SlidingWindow::default();
    let remaining: Vec<_> = (0..4)
        .map(|t| no_ahead.admit(&mut window, t).map(|(v, _)| v.remaining))
        .collect();
    assert_eq!(remaining, [Some(2), Some(1), Some(0), None]);
}

#[test]
fn straight_path_admits_while_a_free_request_is_left_or_two_when_paying_ahead() {
    // (limit, pay ahead): what a burst of four in one window is answered
    // (remaining after it; `None`: left to the full path, nothing counted;
    // no straight path at all: every answer `None`).
    let table: [(u32, bool, [Option<u32>; 4]); 6] = [
        (1, false, [Some(0), None, None, None]),
        // The only free request is the last: its challenge is priced. No
        // straight path (`a_limit_of_one_paying_ahead_has_no_straight_path`):
        // `admit` is never called, every answer `None` by that alone.
        (1, true, [None, None, None, None]),
        (2, false, [Some(1), Some(0), None, None]),
        (2, true, [Some(1), None, None, None]),
        (3, false, [Some(2), Some(1), Some(0), None]),
        (3, true, [Some(2), Some(1), None, None]),
    ];
    for (requests, pay_ahead, expected) in table {
        let rules = one_limit(requests, pay_ahead);
        let straight = Straight::of(&rules);
        let mut window = SlidingWindow::default();
        let mut answered = [None; 4];
        for (t, answer) in (0..4).zip(&mut answered) {
            let before = window;
            *answer = straight
                .and_then(|straight| straight.admit(&mut window, t))
                .map(|(v, _)| v.remaining);
            if answer.is_none() {
                assert_eq!(
                    window, before,
                    "{requests} {pay_ahead} at {t}: nothing counted"
                );
            }
        }
        assert_eq!(
            answered, expected,
            "limit {requests}, pay ahead {pay_ahead}"
        );
    }
}

#[test]
fn a_limit_of_one_paying_ahead_has_no_straight_path() {
    // Its only free request is the last, whose challenge is priced: the
    // window would never admit one on the straight path, and every request
    // would lock the zone twice.
    let table = [
        (1, true, false),
        (1, false, true),
        (2, true, true),
        (2, false, true),
    ];
    for (requests, pay_ahead, straight) in table {
        let rules = one_limit(requests, pay_ahead);
        assert_eq!(
            Straight::of(&rules).is_some(),
            straight,
            "limit {requests}, pay ahead {pay_ahead}"
        );
    }
}

/// A location's rules with one limit of `requests` a second.
fn one_limit(requests: u32, pay_ahead: bool) -> Rules {
    Rules {
        limits: Limits::one(RateLimit {
            requests,
            window_ms: 1_000,
        }),
        pay_ahead,
        ..rules()
    }
}

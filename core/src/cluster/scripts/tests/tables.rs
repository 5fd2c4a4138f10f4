//! The scripts against the Rust model, table by table (`bench`): what the
//! Lua decides for a client's requests is what `store::run` decides for
//! them, except in the rows marked `Differs` (each says why).

use super::bench::{run, same, Expect, Row, Step, Table};
use crate::limiter::breaker::{BanRule, BreakerRules, StrikeRule};
use crate::limiter::RateLimit;
use crate::store::Offence;

use Step::{Batch, Check, Coalesced, Spend, SpendWaitedOut, Strike};

const UNPAID: Step = Check(Offence::Unpaid);
const PAID: Step = Check(Offence::None);
const FAILED: Step = Check(Offence::Failed);

/// 3 requests per 1.5 s: the model's ring has slots of 100 ms.
const THREE: RateLimit = RateLimit {
    requests: 3,
    window_ms: 1_500,
};

const fn strikes(threshold: u32, ttl_ms: u64) -> BreakerRules {
    BreakerRules {
        strikes: Some(StrikeRule { threshold, ttl_ms }),
        ban: None,
    }
}

const fn differs(at: u64, step: Step, why: &'static str) -> Row {
    Row {
        at,
        step,
        expect: Expect::Differs(why),
    }
}

#[test]
fn a_limit_admits_three_then_refuses_strikes_opens_and_blocks() {
    run(&Table {
        name: "window_breaker",
        limits: &[THREE],
        approx: false,
        rules: strikes(3, 2_000),
        rows: &[
            same(0, UNPAID),
            same(0, UNPAID),
            same(0, UNPAID),
            // Refused: over 1, strike 1 (struck), then 2, then the third
            // opens the breaker.
            same(0, UNPAID),
            same(0, UNPAID),
            same(0, UNPAID),
            // Blocked, offence or not: nothing counted, about 2 s left.
            same(0, UNPAID),
            same(100, PAID),
            same(300, FAILED),
        ],
    });
}

#[test]
fn a_refusal_of_a_valid_solution_strikes_nothing_a_failed_one_strikes_for_good() {
    run(&Table {
        name: "window_offences",
        limits: &[THREE],
        approx: false,
        rules: strikes(5, 10_000),
        rows: &[
            same(0, PAID),
            same(0, PAID),
            same(0, PAID),
            same(0, PAID),
            same(0, FAILED),
            same(0, UNPAID),
            // Paying takes back the 429's strike only, never the failure's.
            same(100, Spend(1, true)),
            same(100, Spend(2, true)),
            same(100, Spend(1, true)),
        ],
    });
}

#[test]
fn waiting_out_a_429_takes_its_strike_and_refusal_back() {
    run(&Table {
        name: "window_waited",
        limits: &[THREE],
        approx: false,
        rules: strikes(5, 10_000),
        rows: &[
            same(0, UNPAID),
            same(0, UNPAID),
            same(0, UNPAID),
            same(0, UNPAID),
            same(0, UNPAID),
            // The window slid: admitted without paying, one strike back.
            same(1_600, UNPAID),
            same(1_600, UNPAID),
            same(1_600, UNPAID),
            // Full again: the refusal count starts from what is left.
            same(1_600, UNPAID),
        ],
    });
}

#[test]
fn an_admission_reports_its_limits_refusals_where_the_next_price_is_read() {
    let two = RateLimit {
        requests: 2,
        window_ms: 1_500,
    };
    let no_strikes = BreakerRules::default();
    for (name, limits) in [
        ("overage", &[two][..]),
        // The stacked script: the tightest limit's refusals.
        (
            "overage_stacked",
            &[
                two,
                RateLimit {
                    requests: 9,
                    window_ms: 3_000,
                },
            ][..],
        ),
    ] {
        run(&Table {
            name,
            limits,
            approx: false,
            rules: no_strikes,
            rows: &[
                same(0, UNPAID),
                // None left: the refusals so far (none).
                same(0, UNPAID),
                same(0, UNPAID),
                same(0, PAID),
                same(0, UNPAID),
                // The window slid: paid (one left), the 3 refusals;
                // unpaid leaving none, the 3; refused, the 4th.
                same(1_600, PAID),
                same(1_600, UNPAID),
                same(1_600, UNPAID),
                // Later, unpaid with one left: nothing read (0).
                same(3_200, UNPAID),
            ],
        });
    }
}

#[test]
fn strikes_expire_a_ttl_after_the_last_and_the_window_slides() {
    run(&Table {
        name: "window_expiry",
        limits: &[THREE],
        approx: false,
        rules: strikes(3, 700),
        rows: &[
            same(0, PAID),
            same(0, PAID),
            same(0, PAID),
            same(0, UNPAID),
            same(0, UNPAID),
            // 1 s later: both strikes forgotten, the window still full.
            same(1_000, UNPAID),
            // 1.6 s: the three admissions have left.
            same(1_600, PAID),
        ],
    });
}

#[test]
fn two_openings_within_the_ban_time_ban() {
    run(&Table {
        name: "window_ban",
        limits: &[RateLimit {
            requests: 1,
            window_ms: 1_500,
        }],
        approx: false,
        rules: BreakerRules {
            ban: Some(BanRule {
                after: 2,
                ttl_ms: 4_000,
            }),
            ..strikes(2, 600)
        },
        rows: &[
            same(0, PAID),
            same(0, UNPAID),
            // Opens (trip 1 of 2).
            same(0, UNPAID),
            same(0, UNPAID),
            // The block is over; the window still holds the admission.
            same(800, UNPAID),
            // Opens again: banned, for 4 s.
            same(800, UNPAID),
            same(800, UNPAID),
            same(2_000, PAID),
        ],
    });
}

#[test]
fn the_strike_script_strikes_until_the_breaker_opens_then_nothing() {
    run(&Table {
        name: "strike",
        limits: &[THREE],
        approx: false,
        rules: strikes(3, 2_000),
        rows: &[
            same(0, Strike),
            same(0, Strike),
            same(0, Strike),
            same(0, Strike),
            same(0, Spend(1, true)),
        ],
    });
}

#[test]
fn a_spend_takes_back_an_unpaid_strike_once_and_never_below_zero() {
    run(&Table {
        name: "spend",
        limits: &[RateLimit {
            requests: 1,
            window_ms: 1_500,
        }],
        approx: false,
        rules: strikes(3, 5_000),
        rows: &[
            same(0, Spend(1, true)),
            same(0, UNPAID),
            same(0, UNPAID),
            same(0, Spend(2, true)),
            // A replay: nothing changes.
            same(0, Spend(2, true)),
            // A challenge whose 429 counted no strike takes back nothing.
            same(0, Spend(3, false)),
            same(0, Spend(4, true)),
            same(0, Spend(5, true)),
            same(0, UNPAID),
            same(0, UNPAID),
            same(0, UNPAID),
            // Blocked: nothing spent.
            same(0, Spend(6, true)),
        ],
    });
}

#[test]
fn a_429_waited_out_then_paid_takes_back_one_strike_and_banks_nothing() {
    run(&Table {
        name: "waited_then_paid",
        limits: &[RateLimit {
            requests: 1,
            window_ms: 1_500,
        }],
        approx: false,
        rules: strikes(5, 10_000),
        rows: &[
            same(0, UNPAID),
            // 429: a strike.
            same(0, UNPAID),
            // Its Retry-After waited out: admitted, the strike taken back.
            same(1_600, UNPAID),
            // Its token paid afterwards: accepted, nothing more to take back,
            // and nothing kept for a strike still to come.
            same(1_600, SpendWaitedOut(1)),
            // So the next 429s a node counted are strikes, every one.
            same(1_600, Batch(2)),
            // A spend before its Retry-After ended takes back a strike
            // there is ...
            same(1_600, Spend(2, true)),
            same(1_600, Spend(3, true)),
            // ... and one not there yet is kept for the batch on its way.
            same(1_600, Spend(4, true)),
            differs(
                1_600,
                Batch(1),
                "a spend that came before its 429's strike (in a node's batch) takes it \
                 back when the batch comes; the zone counts no batches",
            ),
        ],
    });
}

#[test]
fn a_batch_counts_its_refusals_as_the_window_script_would_one_by_one() {
    run(&Table {
        name: "batch",
        limits: &[THREE],
        approx: false,
        rules: strikes(4, 5_000),
        rows: &[
            same(0, PAID),
            same(0, PAID),
            same(0, PAID),
            same(0, Batch(3)),
            same(0, Spend(1, true)),
            differs(
                0,
                Batch(3),
                "the batch crossing the threshold counts every 429 the node sent (5 strikes); \
                 one by one, the 5th check would have been blocked (4)",
            ),
            differs(
                0,
                Batch(1),
                "blocked meanwhile: a batch's 429s were sent and still count as strikes \
                 (without extending the block); a blocked check counts nothing",
            ),
        ],
    });
}

#[test]
fn a_coalesced_call_answers_each_request_as_one_call_each_would() {
    run(&Table {
        name: "coalesced",
        limits: &[THREE],
        approx: false,
        rules: strikes(3, 300),
        rows: &[
            same(0, UNPAID),
            // 2 admitted, 3 refused with a strike each (the last opens), 3
            // blocked.
            same(0, Coalesced(8)),
            same(0, Coalesced(2)),
            // The block over (strikes last 0.3 s), the window still full:
            // the refusals counted are the 3 struck and this one.
            same(500, UNPAID),
        ],
    });
}

#[test]
fn stacked_limits_count_only_when_all_have_room_and_name_the_one_that_decided() {
    run(&Table {
        name: "stacked",
        // Slots of 100 and 200 ms.
        limits: &[
            RateLimit {
                requests: 2,
                window_ms: 1_500,
            },
            RateLimit {
                requests: 3,
                window_ms: 3_000,
            },
        ],
        approx: false,
        rules: strikes(5, 10_000),
        rows: &[
            same(0, UNPAID),
            same(0, UNPAID),
            // The first limit refuses: its refusal, its strike.
            same(0, UNPAID),
            // 1.6 s: the first limit has room again, the second one slot.
            same(1_600, UNPAID),
            // The second refuses now.
            same(1_600, UNPAID),
            same(1_600, FAILED),
            same(1_600, Strike),
        ],
    });
}

#[test]
fn the_approximate_counter_weighs_the_previous_window_by_its_share() {
    run(&Table {
        name: "approx",
        limits: &[RateLimit {
            requests: 4,
            window_ms: 1_000,
        }],
        approx: true,
        rules: BreakerRules {
            strikes: None,
            ban: None,
        },
        rows: &[
            same(0, PAID),
            same(0, PAID),
            same(0, PAID),
            same(0, PAID),
            same(0, PAID),
            // The next fixed window, 40 % in: 4 × 0.6 = 2.4 counted.
            same(1_400, PAID),
            same(1_400, PAID),
            same(1_400, PAID),
            // Two later: only the previous window's 2, × 0.4.
            same(2_600, PAID),
            same(2_600, PAID),
        ],
    });
}

//! The decision as a table: the request loop every handler runs (next →
//! ask → next … → done) against the in-memory store, whose order of steps
//! is the zone's (`store::run`). One test per behaviour of the spec's three
//! zones, fail policies, dry run and breaker: a table longer than 600
//! lines, kept in one file so that it reads as one specification.

use super::*;
use crate::limiter::breaker::StrikeRule;
use crate::limiter::RateLimit;
use crate::store::{Checked, MemoryStore, Subject};
use crate::syntax::Difficulty;

/// Paying ahead (SPEC §4).
mod ahead;
/// The green path without a decision's steps.
mod green;
/// Internal redirects into another policy.
mod redirect;
/// What a store's answer to a spend decides (SPEC §5).
mod spent;
/// Local mode's common request in one pass.
mod straight;

const LIMIT_2: RateLimit = RateLimit {
    requests: 2,
    window_ms: 60_000,
};

fn rules() -> Rules {
    Rules {
        limits: Limits::one(LIMIT_2),
        difficulty: DifficultyRule::hex(4),
        breaker: BreakerRules {
            strikes: Some(StrikeRule {
                threshold: 5,
                ttl_ms: 60_000,
            }),
            ban: None,
        },
        fail: FailPolicy::Local,
        dry_run: false,
        trap: false,
        pay_ahead: true,
    }
}

fn solution(n: u8) -> Solution {
    Solution {
        digest: [n; 32],
        spent_until_ms: 120_000,
        generation: None,
        forgive: true,
        retry_at_ms: None,
    }
}

const VALID: fn(u8) -> Payment = |n| Payment::Valid(solution(n));
const WRONG: Payment = Payment::Invalid(Rejection::WrongSolution);

/// The in-memory store (the same order of steps as the zone's) and the
/// request loop every handler runs: next → ask → next … → done.
#[derive(Default)]
struct FakeStore {
    store: MemoryStore,
}

impl FakeStore {
    /// Runs one request; `trusted` is the value of `pow_shield_fail closed
    /// trusted=`.
    fn request(
        &mut self,
        key: &'static str,
        rules: Rules,
        payment: Payment,
        trusted: bool,
    ) -> Final {
        let subject = Subject {
            key: key.as_bytes(),
            limits: &rules.limits,
            key_values: crate::store::CLIENT_KEYS,
            rules: rules.breaker,
            rising: false,
        };
        let mut decision = Decision::new(rules, payment, key.is_empty());
        let mut reply = None;
        loop {
            match decision.next(reply, || trusted) {
                Next::Ask(op) => reply = Some(self.store.ask(op, &subject)),
                Next::Done(done) => return done,
            }
        }
    }

    fn get(&mut self, key: &'static str, payment: Payment) -> Final {
        self.request(key, rules(), payment, false)
    }

    /// The operations asked so far, by name.
    fn calls(&self) -> Vec<&'static str> {
        self.store
            .calls
            .iter()
            .map(|op| match op {
                Op::Check { .. } => "check",
                Op::Spend(_) => "spend",
                Op::Strike => "strike",
            })
            .collect()
    }

    fn strikes(&self, key: &str) -> u32 {
        self.store.strikes(key.as_bytes())
    }
}

fn status(end: &Final) -> u16 {
    match end.answer {
        None => 200,
        Some(Answer::Challenge { status, .. } | Answer::Error { status, .. }) => status,
        Some(Answer::Block(_)) => 403,
        Some(Answer::Unavailable) => 503,
        Some(Answer::NotFound) => 404,
    }
}

fn statuses(store: &mut FakeStore, key: &'static str, payment: Payment, n: usize) -> Vec<u16> {
    (0..n).map(|_| status(&store.get(key, payment))).collect()
}

/* zones */

#[test]
fn green_requests_pass_with_one_check_each() {
    let mut s = FakeStore::default();
    assert_eq!(statuses(&mut s, "a", Payment::Unpaid, 2), [200, 200]);
    assert_eq!(s.calls(), ["check", "check"]);
}

#[test]
fn an_empty_key_is_exempt_and_asks_no_store() {
    let mut s = FakeStore::default();
    let end = s.get("", Payment::Unpaid);
    assert_eq!(end.outcome, Outcome::Exempt);
    assert!(s.calls().is_empty());
}

#[test]
fn over_the_limit_without_a_solution_is_a_429_challenge() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    let end = s.get("a", Payment::Unpaid);
    assert_eq!(end.outcome, Outcome::Challenge);
    assert_eq!(
        end.answer,
        Some(Answer::Challenge {
            status: 429,
            error: None,
            bits: 16
        })
    );
}

#[test]
fn under_the_limit_a_wrong_solution_is_ignored() {
    let mut s = FakeStore::default();
    let end = s.get("a", WRONG);
    assert_eq!((status(&end), end.outcome), (200, Outcome::Pass));
    assert_eq!(s.calls(), ["check"]);
}

#[test]
fn under_the_limit_a_valid_solution_is_spent_to_take_back_its_strike() {
    // Paid, but a slot freed while the client solved.
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 3);
    assert_eq!(s.strikes("a"), 1);
    s.store.at(60_000);
    let end = s.get("a", VALID(1));
    assert_eq!((status(&end), end.outcome), (200, Outcome::Pass));
    assert_eq!(s.strikes("a"), 0);
    assert!(s.store.spent.contains_key(&[1; 32]));
    // Spent already: still green, and no strike.
    let end = s.get("a", VALID(1));
    assert_eq!((status(&end), end.outcome), (200, Outcome::Pass));
    assert_eq!(s.strikes("a"), 0);
}

#[test]
fn over_the_limit_a_valid_solution_is_spent_once() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    let end = s.get("a", VALID(1));
    assert_eq!((status(&end), end.outcome), (200, Outcome::Solved));
    let again = s.get("a", VALID(1));
    assert_eq!(status(&again), 409);
    assert_eq!(again.outcome, Outcome::Invalid);
}

#[test]
fn a_wrong_solution_is_refused_before_the_replay_store_is_touched() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    s.store.calls.clear();
    let end = s.get("a", WRONG);
    assert_eq!(status(&end), 422);
    assert_eq!(s.calls(), ["check"], "no spend, no second round trip");
}

#[test]
fn every_verification_failure_has_the_spec_status_and_fresh_challenge_rule() {
    let cases = [
        (Rejection::Malformed, 400, false),
        (Rejection::BadSignature, 403, false),
        (Rejection::BadPayload, 400, false),
        (Rejection::WrongIp, 403, false),
        (Rejection::Expired, 410, true),
        (Rejection::WrongSolution, 422, true),
    ];
    for (rejection, want, fresh) in cases {
        let mut s = FakeStore::default();
        statuses(&mut s, "a", Payment::Unpaid, 2);
        let end = s.get("a", Payment::Invalid(rejection));
        assert_eq!(status(&end), want, "{rejection:?}");
        let has_challenge = matches!(end.answer, Some(Answer::Challenge { .. }));
        assert_eq!(has_challenge, fresh, "{rejection:?}");
    }
}

/* fail policies */

fn down_store() -> FakeStore {
    let mut s = FakeStore::default();
    s.store.down = true;
    s
}

fn with_fail(fail: FailPolicy) -> Rules {
    Rules { fail, ..rules() }
}

#[test]
fn fail_open_lets_requests_through_while_the_store_is_down() {
    let end = down_store().request("a", with_fail(FailPolicy::Open), Payment::Unpaid, false);
    assert_eq!((status(&end), end.outcome), (200, Outcome::Pass));
}

#[test]
fn fail_closed_refuses_with_503_unless_trusted() {
    let closed = with_fail(FailPolicy::Closed);
    let end = down_store().request("a", closed, Payment::Unpaid, false);
    assert_eq!((status(&end), end.outcome), (503, Outcome::Unavailable));
    let end = down_store().request("a", closed, Payment::Unpaid, true);
    assert_eq!(status(&end), 200);
}

#[test]
fn a_zone_full_of_spent_records_refuses_a_new_client_with_503() {
    let mut decision = Decision::new(rules(), Payment::Unpaid, false);
    assert_eq!(
        decision.next(None, || false),
        Next::Ask(Op::Check {
            offence: Offence::Unpaid
        })
    );
    let end = done(decision.next(
        Some(Reply::Full {
            retry_after_ms: 5_000,
        }),
        || false,
    ));
    assert_eq!(end.retry_after_ms, Some(5_000));
    assert_eq!((status(&end), end.outcome), (503, Outcome::Unavailable));
}

#[test]
fn a_solution_that_cannot_be_recorded_is_not_accepted_and_its_payer_gets_a_fresh_challenge() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    s.store.full = true;
    let end = s.get("a", VALID(1));
    assert_eq!((status(&end), end.outcome), (429, Outcome::Challenge));
    assert!(!end.struck, "no offence");
    // its 429's strike is taken back when the fresh challenge is paid
    assert!(end.pays_back);
}

#[test]
fn a_store_down_while_spending_follows_the_fail_policy() {
    // The check answers, the spend finds Redis gone (and no fallback).
    let spend_down = |fail| {
        let mut s = FakeStore::default();
        statuses(&mut s, "a", Payment::Unpaid, 2);
        let mut decision = Decision::new(with_fail(fail), VALID(1), false);
        let subject = Subject {
            key: b"a",
            limits: &Limits::one(LIMIT_2),
            key_values: crate::store::CLIENT_KEYS,
            rules: rules().breaker,
            rising: false,
        };
        let Next::Ask(check) = decision.next(None, || false) else {
            panic!("a check first");
        };
        let checked = s.store.ask(check, &subject);
        assert_eq!(
            decision.next(Some(checked), || false),
            Next::Ask(Op::Spend(solution(1)))
        );
        done(decision.next(Some(Reply::Down), || false))
    };
    assert_eq!(status(&spend_down(FailPolicy::Closed)), 503);
    let end = spend_down(FailPolicy::Open);
    assert_eq!((status(&end), end.outcome), (200, Outcome::Solved));
}

fn done(next: Next) -> Final {
    match next {
        Next::Done(end) => end,
        other => panic!("expected an end, got {other:?}"),
    }
}

/* dry run */

#[test]
fn dry_run_decides_and_counts_but_never_rejects() {
    let dry = Rules {
        dry_run: true,
        ..rules()
    };
    let mut s = FakeStore::default();
    let ends: Vec<Final> = (0..10)
        .map(|_| s.request("a", dry, Payment::Unpaid, false))
        .collect();
    assert!(ends.iter().all(|e| e.answer.is_none()));
    let outcomes: Vec<Outcome> = ends.iter().map(|e| e.outcome).collect();
    assert_eq!(
        outcomes[..3],
        [Outcome::Pass, Outcome::Pass, Outcome::Challenge]
    );
    assert_eq!(outcomes[7], Outcome::Blocked, "the 6th offence would block");
}

/* red zone */

#[test]
fn the_sixth_offence_is_blocked_and_the_five_before_are_429() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    assert_eq!(
        statuses(&mut s, "a", Payment::Unpaid, 7),
        [429, 429, 429, 429, 429, 403, 403]
    );
    let end = s.get("a", Payment::Unpaid);
    assert_eq!(end.outcome, Outcome::Blocked);
    assert_eq!(end.answer, Some(Answer::Block(Block::Blocked)));
}

#[test]
fn a_blocked_client_is_blocked_under_its_limit_too_and_adds_no_strikes() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 7);
    s.store.at(59_000);
    // The bucket has drained; the breaker still holds.
    assert_eq!(statuses(&mut s, "a", Payment::Unpaid, 3), [403, 403, 403]);
    assert_eq!(s.strikes("a"), 5);
    s.store.at(60_000);
    assert_eq!(status(&s.get("a", Payment::Unpaid)), 200);
}

#[test]
fn wrong_solutions_count_as_strikes_and_a_blocked_request_spends_nothing() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    assert_eq!(statuses(&mut s, "a", WRONG, 5), [422; 5]);
    assert_eq!(status(&s.get("a", VALID(9))), 403);
    assert!(
        s.store.spent.is_empty(),
        "the solution stays usable by another client"
    );
    statuses(&mut s, "b", Payment::Unpaid, 2);
    assert_eq!(status(&s.get("b", VALID(9))), 200);
}

#[test]
fn a_replayed_solution_is_a_strike() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    s.get("a", VALID(1));
    s.store.calls.clear();
    assert_eq!(status(&s.get("a", VALID(1))), 409);
    assert_eq!(s.calls(), ["check", "spend", "strike"]);
    assert_eq!(s.strikes("a"), 1);
}

#[test]
fn a_valid_solution_is_not_a_strike() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    for n in 0..10 {
        assert_eq!(status(&s.get("a", VALID(n))), 200);
    }
    assert_eq!(s.strikes("a"), 0);
}

/// One challenge and its payment: the 429, then the solved request.
fn pay(s: &mut FakeStore, n: u8) -> (u16, u16) {
    let challenge = status(&s.get("a", Payment::Unpaid));
    (challenge, status(&s.get("a", VALID(n))))
}

#[test]
fn a_client_that_pays_every_challenge_is_never_blocked() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    // 50 paid requests within a minute (the bucket frees a slot every
    // 30 s: then the request is green).
    for n in 0..50 {
        s.store.at(u64::from(n) * 1_000);
        let (challenge, paid) = pay(&mut s, n);
        assert!(matches!(challenge, 429 | 200), "request {n}: {challenge}");
        assert_eq!(paid, 200, "paid request {n}");
    }
    assert_eq!(s.strikes("a"), 0);
}

#[test]
fn n_minus_one_challenges_in_flight_each_paid_never_block() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    for round in 0..10u8 {
        // Four requests at once get four challenges: four strikes of five.
        assert_eq!(statuses(&mut s, "a", Payment::Unpaid, 4), [429; 4]);
        for n in 0..4 {
            assert_eq!(status(&s.get("a", VALID(round * 4 + n))), 200);
        }
        assert_eq!(s.strikes("a"), 0, "round {round}");
    }
}

#[test]
fn paying_earns_no_credit() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    // Solutions of challenges issued to others take back nothing below 0.
    for n in 0..10 {
        assert_eq!(status(&s.get("a", VALID(n))), 200);
    }
    assert_eq!(
        statuses(&mut s, "a", Payment::Unpaid, 6),
        [429, 429, 429, 429, 429, 403]
    );
}

#[test]
fn a_wrong_answer_per_paid_challenge_still_blocks() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    // 429 (strike), 422 (strike), paid (one taken back): one more each time.
    for n in 0..3 {
        assert_eq!(status(&s.get("a", Payment::Unpaid)), 429);
        assert_eq!(status(&s.get("a", WRONG)), 422);
        assert_eq!(status(&s.get("a", VALID(n))), 200);
    }
    assert_eq!(s.strikes("a"), 3);
    assert_eq!(status(&s.get("a", Payment::Unpaid)), 429);
    assert_eq!(status(&s.get("a", WRONG)), 422, "the 5th strike");
    assert_eq!(status(&s.get("a", VALID(9))), 403, "paying now is too late");
}

#[test]
fn paying_takes_back_no_failed_verification() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    assert_eq!(statuses(&mut s, "a", WRONG, 2), [422, 422]);
    // The 422s' fresh challenges, paid: their strikes stay.
    assert_eq!(status(&s.get("a", VALID(1))), 200);
    assert_eq!(status(&s.get("a", VALID(2))), 200);
    assert_eq!(s.strikes("a"), 2);
    assert_eq!(statuses(&mut s, "a", WRONG, 4), [422, 422, 422, 403]);
}

#[test]
fn a_block_found_by_the_spend_sends_no_rate_limit_headers() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 7);
    let subject = Subject {
        key: b"a",
        limits: &Limits::one(LIMIT_2),
        key_values: crate::store::CLIENT_KEYS,
        rules: rules().breaker,
        rising: false,
    };
    let mut decision = Decision::new(rules(), VALID(3), false);
    let checked = Reply::Checked(Checked {
        verdict: Verdict::default(),
        breaker: BreakerStatus::default(),
        ..Checked::default()
    });
    assert!(matches!(decision.next(None, || false), Next::Ask(_)));
    let Next::Ask(spend) = decision.next(Some(checked), || false) else {
        panic!("a spend");
    };
    let end = done(decision.next(Some(s.store.ask(spend, &subject)), || false));
    assert_eq!(end.outcome, Outcome::Blocked);
    assert_eq!(end.verdict, None);
}

#[test]
fn a_replay_strike_is_never_taken_back_by_the_replay() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    assert_eq!(status(&s.get("a", VALID(1))), 200);
    let replays: Vec<u16> = (0..6).map(|_| status(&s.get("a", VALID(1)))).collect();
    assert_eq!(replays, [409, 409, 409, 409, 409, 403]);
}

#[test]
fn a_client_blocked_between_check_and_spend_spends_nothing() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    let subject = Subject {
        key: b"a",
        limits: &Limits::one(LIMIT_2),
        key_values: crate::store::CLIENT_KEYS,
        rules: rules().breaker,
        rising: false,
    };
    let mut decision = Decision::new(rules(), VALID(7), false);
    let Next::Ask(check) = decision.next(None, || false) else {
        panic!("a check first");
    };
    let checked = s.store.ask(check, &subject);
    let spend = decision.next(Some(checked), || false);
    assert_eq!(spend, Next::Ask(Op::Spend(solution(7))));
    // Meanwhile other requests of the client open the breaker.
    statuses(&mut s, "a", Payment::Unpaid, 5);
    let Next::Ask(spend) = spend else {
        unreachable!()
    };
    let end = done(decision.next(Some(s.store.ask(spend, &subject)), || false));
    assert_eq!((status(&end), end.outcome), (403, Outcome::Blocked));
    assert!(s.store.spent.is_empty());
    assert_eq!(s.strikes("a"), 5);
}

#[test]
fn strikes_off_never_blocks() {
    let off = Rules {
        breaker: BreakerRules::default(),
        ..rules()
    };
    let mut s = FakeStore::default();
    let all: Vec<u16> = (0..20)
        .map(|_| status(&s.request("a", off, Payment::Unpaid, false)))
        .collect();
    assert!(all[2..].iter().all(|&st| st == 429));
}

fn trap() -> Rules {
    Rules {
        limits: Limits::NONE,
        trap: true,
        ..rules()
    }
}

#[test]
fn a_trap_answers_404_with_a_strike_and_blocks_the_sixth_hit() {
    let mut s = FakeStore::default();
    let hits: Vec<Final> = (0..7)
        .map(|_| s.request("a", trap(), Payment::Unpaid, false))
        .collect();
    let got: Vec<u16> = hits.iter().map(status).collect();
    assert_eq!(got, [404, 404, 404, 404, 404, 403, 403]);
    assert_eq!(hits[0].outcome, Outcome::Trap);
    // The trap's strikes block the client on shielded locations too.
    assert_eq!(status(&s.get("a", Payment::Unpaid)), 403);
}

#[test]
fn a_trap_with_strikes_off_only_answers_404() {
    let mut s = FakeStore::default();
    let off = Rules {
        breaker: BreakerRules::default(),
        ..trap()
    };
    let end = s.request("a", off, Payment::Unpaid, false);
    assert_eq!(status(&end), 404);
    assert!(s.calls().is_empty());
}

#[test]
fn a_trap_answers_an_exempt_client_404_without_a_strike() {
    let mut s = FakeStore::default();
    let end = s.request("", trap(), Payment::Unpaid, false);
    assert_eq!((status(&end), end.outcome), (404, Outcome::Trap));
    assert!(s.calls().is_empty());
}

#[test]
fn a_trap_still_answers_404_when_the_store_is_down() {
    let end = down_store().request("a", trap(), Payment::Unpaid, false);
    assert_eq!(status(&end), 404);
}

#[test]
fn a_ban_follows_k_openings_and_answers_banned() {
    let banning = Rules {
        breaker: BreakerRules {
            ban: Some(crate::limiter::breaker::BanRule {
                after: 2,
                ttl_ms: 600_000,
            }),
            ..rules().breaker
        },
        ..rules()
    };
    let mut s = FakeStore::default();
    let offend = |s: &mut FakeStore, n| {
        (0..n)
            .map(|_| s.request("a", banning, Payment::Unpaid, false))
            .last()
    };
    offend(&mut s, 8);
    s.store.at(61_000);
    let end = offend(&mut s, 8).unwrap();
    assert_eq!(end.outcome, Outcome::Banned);
    assert_eq!(end.answer, Some(Answer::Block(Block::Banned)));
    s.store.at(661_000);
    assert_eq!(
        status(&s.request("a", banning, Payment::Unpaid, false)),
        200,
        "the ban ended"
    );
}

#[test]
fn difficulty_rises_with_strikes_and_volume_up_to_max() {
    let rising = Rules {
        difficulty: DifficultyRule::rising(Difficulty::bits(9), Difficulty::bits(12)),
        breaker: BreakerRules {
            strikes: Some(StrikeRule {
                threshold: 50,
                ttl_ms: 60_000,
            }),
            ban: None,
        },
        ..rules()
    };
    let mut s = FakeStore::default();
    let difficulties: Vec<u8> = (0..40)
        .filter_map(
            |_| match s.request("a", rising, Payment::Unpaid, false).answer {
                Some(Answer::Challenge { bits, .. }) => Some(bits),
                _ => None,
            },
        )
        .collect();
    assert_eq!(
        difficulties.first(),
        Some(&9),
        "a fresh offender pays the base"
    );
    assert!(difficulties.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(difficulties.last(), Some(&12));
}

/// A Redis Cluster answers a check with the client's slot generation.
fn checked_in(generation: u64, allowed: bool) -> Reply {
    Reply::Checked(Checked {
        verdict: Verdict {
            allowed,
            ..Verdict::default()
        },
        generation: Some(generation),
        ..Checked::default()
    })
}

fn issued_in(generation: u64) -> Payment {
    Payment::Valid(Solution {
        generation: Some(generation),
        ..solution(1)
    })
}

/// A decision for `payment` after the check answered `checked`: it and
/// what it does next.
fn after_check(payment: Payment, checked: Reply) -> (Decision, Next) {
    let mut decision = Decision::new(rules(), payment, false);
    assert!(matches!(
        decision.next(None, || false),
        Next::Ask(Op::Check { .. })
    ));
    let next = decision.next(Some(checked), || false);
    (decision, next)
}

#[test]
fn a_challenge_is_priced_from_the_strikes_and_refusals_the_check_answered() {
    let rising = Rules {
        limits: Limits::one(LIMIT_2),
        difficulty: DifficultyRule {
            base: 8,
            max: 24,
            step: 1,
        },
        ..rules()
    };
    // (strikes, refusals under the limit, bits): one bit a doubling of the
    // refusals (the limit allows 2), one every two strikes.
    let cases = [(0, 0, 8), (4, 0, 10), (0, 6, 10), (4, 6, 12)];
    for (strikes, over, bits) in cases {
        let mut decision = Decision::new(rising, Payment::Unpaid, false);
        assert!(matches!(decision.next(None, || false), Next::Ask(_)));
        let checked = Reply::Checked(Checked {
            verdict: Verdict {
                allowed: false,
                over,
                ..Verdict::default()
            },
            breaker: BreakerStatus {
                strikes,
                ..BreakerStatus::default()
            },
            ..Checked::default()
        });
        let end = done(decision.next(Some(checked), || false));
        assert_eq!(end.bits(), Some(bits), "{strikes} strikes, {over} over");
    }
}

//! What a store's answer to a spend decides (SPEC §5). Whether a correct
//! solution can be spent now (Redis unavailable, another generation's, no
//! room for its record) is the store's to say (`cluster::node`'s spend
//! path): the decision only reads its answer, the same in local mode and
//! cluster mode.

use super::*;
use crate::limiter::breaker::Block;

/// What a refused request that paid gets for each answer to its spend:
/// (status, outcome, struck, pays back), or the strike asked first.
#[test]
fn every_answer_to_a_spend_has_one_outcome() {
    let blocked = BreakerStatus {
        block: Block::Blocked,
        ..BreakerStatus::default()
    };
    let spent = |s| Some(Reply::Spent(s));
    // (answer, asks a strike first, status, outcome, pays back)
    #[rustfmt::skip]
    let table = [
        // Spent: it admits the request.
        (spent(Spent::Accepted(BreakerStatus::default())), false, 200, Outcome::Solved, false),
        // Spent before (or in a generation the store lost): an offence.
        (spent(Spent::Replayed), true, 409, Outcome::Invalid, false),
        (spent(Spent::Blocked(blocked)), false, 403, Outcome::Blocked, false),
        // Not recorded: no offence, a fresh challenge; it pays back the
        // first one's strike when the store says so.
        (spent(Spent::NotRecorded { pays_back: true }), false, 429, Outcome::Challenge, true),
        (spent(Spent::NotRecorded { pays_back: false }), false, 429, Outcome::Challenge, false),
        // No room to record it: refused, never passed.
        (Some(Reply::Full { retry_after_ms: 1_000 }), false, 503, Outcome::Unavailable, false),
        // The store is down (no fallback answered): `pow_shield_fail`
        // (here `local`: through).
        (Some(Reply::Down), false, 200, Outcome::Solved, false),
        (None, false, 200, Outcome::Solved, false),
    ];
    for (i, (answer, strikes, want, outcome, pays_back)) in table.into_iter().enumerate() {
        let (mut decision, next) = after_check(VALID(1), checked_in(6, false));
        assert!(matches!(next, Next::Ask(Op::Spend(_))), "row {i}");
        let mut next = decision.next(answer, || false);
        if strikes {
            assert!(matches!(next, Next::Ask(Op::Strike)), "row {i}: {next:?}");
            next = decision.next(Some(Reply::Struck(Struck::default())), || false);
        }
        let end = done(next);
        assert_eq!((status(&end), end.outcome), (want, outcome), "row {i}");
        assert!(!end.struck, "row {i}: the spend struck nothing");
        assert_eq!(end.pays_back, pays_back, "row {i}");
    }
}

#[test]
fn a_solution_not_recorded_under_the_limit_passes() {
    // Admitted (a slot freed while the client solved): it passes whatever
    // its spend answered, and its fresh challenge is the one sent ahead.
    for pays_back in [true, false] {
        let (mut decision, next) = after_check(VALID(1), checked_in(6, true));
        assert!(matches!(next, Next::Ask(Op::Spend(_))), "its strike back");
        let not_recorded = Reply::Spent(Spent::NotRecorded { pays_back });
        let end = done(decision.next(Some(not_recorded), || false));
        assert_eq!((status(&end), end.outcome), (200, Outcome::Pass));
        assert!(!end.pays_back && end.next.is_some());
    }
}

#[test]
fn a_paid_request_is_checked_as_no_offence_and_spent_whatever_its_generation() {
    let mut decision = Decision::new(rules(), issued_in(5), false);
    let Next::Ask(Op::Check { offence }) = decision.next(None, || false) else {
        panic!("checked first");
    };
    assert_eq!(offence, Offence::None, "no offence");
    // The check answered another generation (a Redis Cluster slot's): the
    // store's spend says whether that one can be spent.
    let Next::Ask(Op::Spend(spend)) = decision.next(Some(checked_in(6, false)), || false) else {
        panic!("spent");
    };
    assert_eq!(spend.generation, Some(5));
    let not_recorded = Reply::Spent(Spent::NotRecorded { pays_back: true });
    let end = done(decision.next(Some(not_recorded), || false));
    assert_eq!(
        (status(&end), end.struck, end.pays_back),
        (429, false, true)
    );
    assert_eq!(
        end.generation,
        Some(6),
        "the check's generation, passed on to the challenge untouched"
    );
}

#[test]
fn the_zone_standing_in_for_redis_counts_no_unpaid_strike() {
    let unpaid = Op::Check {
        offence: Offence::Unpaid,
    };
    let none = Op::Check {
        offence: Offence::None,
    };
    let failed = Op::Check {
        offence: Offence::Failed,
    };
    assert_eq!(unpaid.standing_in(), none);
    assert_eq!(
        failed.standing_in(),
        failed,
        "a failed verification still strikes"
    );
    assert_eq!(Op::Strike.standing_in(), Op::Strike);
}

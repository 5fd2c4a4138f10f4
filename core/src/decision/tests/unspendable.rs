//! A correct solution that cannot be spent right now (Redis unavailable,
//! another node's challenge during an outage, a generation being learnt):
//! no offence, and a fresh challenge that pays back its strike.

use super::*;

#[test]
fn a_solution_that_cannot_be_spent_now_gets_a_fresh_challenge_and_no_strike() {
    let (mut decision, next) = after_check(VALID(1), checked_in(6, false));
    assert!(matches!(next, Next::Ask(Op::Spend(_))));
    let next = decision.next(Some(Reply::Spent(Spent::Unavailable)), || false);
    assert!(
        matches!(next, Next::Ask(Op::Forgive(_))),
        "recorded to take back its strike"
    );
    // Redis answers again meanwhile: nothing recorded, the fresh one pays back.
    let end = done(decision.next(Some(Reply::Spent(Spent::Unavailable)), || false));
    assert_eq!(status(&end), 429);
    assert_eq!(end.outcome, Outcome::Challenge);
    assert!(!end.struck, "no strike: the client paid");
    assert!(end.pays_back, "the fresh challenge takes back its strike");
}

#[test]
fn a_solution_recorded_while_redis_is_down_answers_a_fresh_challenge_that_pays_back_nothing_more() {
    let mut decision = Decision::new(rules(), Payment::Unspendable(solution(1)), false);
    decision.next(None, || false);
    let next = decision.next(Some(checked_in(6, false)), || false);
    assert!(matches!(next, Next::Ask(Op::Forgive(_))));
    let accepted = Reply::Spent(Spent::Accepted(BreakerStatus::default()));
    let end = done(decision.next(Some(accepted), || false));
    assert_eq!(
        (status(&end), end.struck, end.pays_back),
        (429, false, false)
    );
    let mut again = Decision::new(rules(), Payment::Unspendable(solution(1)), false);
    again.next(None, || false);
    again.next(Some(checked_in(6, false)), || false);
    let next = again.next(Some(Reply::Spent(Spent::Replayed)), || false);
    assert!(
        matches!(next, Next::Ask(Op::Strike)),
        "used twice: a replay"
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

#[test]
fn a_solution_of_a_generation_being_learnt_is_no_offence_and_its_fresh_challenge_pays_back() {
    let mut decision = Decision::new(rules(), Payment::Unspendable(solution(1)), false);
    let Next::Ask(Op::Check { offence }) = decision.next(None, || false) else {
        panic!("checked first");
    };
    assert_eq!(offence, Offence::None, "no offence");
    let next = decision.next(Some(checked_in(6, false)), || false);
    assert!(matches!(next, Next::Ask(Op::Forgive(_))));
    let end = done(decision.next(Some(Reply::Spent(Spent::Unavailable)), || false));
    assert_eq!((status(&end), end.struck), (429, false));
    assert!(
        end.pays_back,
        "paying the fresh one takes back the first's strike"
    );
    let green = Decision::new(rules(), Payment::Unspendable(solution(2)), false);
    let mut green = green;
    green.next(None, || false);
    let end = done(green.next(Some(checked_in(6, true)), || false));
    assert_eq!(status(&end), 200, "under the limit it passes, unspent");
}

//! Paying ahead (SPEC §4): the next challenge goes with a passed request
//! after which the client has no free request left, and with every paid
//! one, at the price the next request will be asked; a solution paid
//! ahead is not spent under the limit.

use super::*;

/// A solution of a challenge sent ahead: its 429 counted no strike.
fn ahead(n: u8) -> Payment {
    Payment::Valid(Solution {
        forgive: false,
        ..solution(n)
    })
}

#[test]
fn the_last_free_request_carries_the_next_challenge_and_the_first_does_not() {
    let mut s = FakeStore::default();
    let first = s.get("a", Payment::Unpaid);
    assert_eq!((status(&first), first.next), (200, None));
    let last = s.get("a", Payment::Unpaid);
    assert_eq!((status(&last), last.next), (200, Some(16)));
}

#[test]
fn a_solution_paid_ahead_admits_the_next_request_over_the_limit_and_sends_another() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    for n in 1..=5 {
        let end = s.get("a", ahead(n));
        assert_eq!((status(&end), end.outcome), (200, Outcome::Solved));
        assert_eq!(end.next, Some(16), "paid request {n} carries the next");
    }
    assert_eq!(s.strikes("a"), 0, "paying is no offence");
    assert_eq!(status(&s.get("a", ahead(1))), 409, "spent once");
}

#[test]
fn under_the_limit_a_solution_paid_ahead_passes_unspent_and_stays_usable() {
    let mut s = FakeStore::default();
    let end = s.get("a", ahead(1));
    assert_eq!((status(&end), end.outcome), (200, Outcome::Pass));
    assert_eq!(end.next, Some(16), "a paid request carries the next");
    assert_eq!(s.calls(), ["check"], "nothing spent");
    assert!(!s.store.spent.contains_key(&[1; 32]));
    s.get("a", Payment::Unpaid);
    let over = s.get("a", ahead(1));
    assert_eq!((status(&over), over.outcome), (200, Outcome::Solved));
}

#[test]
fn the_next_challenge_is_priced_as_the_next_request_will_be() {
    // 4 max=8 (16 to 32 bits) under a limit of 2: the price rises a hex
    // digit when the client goes to twice its limit.
    let rising = Rules {
        difficulty: DifficultyRule::rising(Difficulty::hex(4), Difficulty::hex(8)),
        ..rules()
    };
    let mut s = FakeStore::default();
    let asked: Vec<Option<u8>> = (0..8u8)
        .map(|n| {
            let payment = if n < 2 { Payment::Unpaid } else { ahead(n) };
            s.request("a", rising, payment, false).next
        })
        .collect();
    // The next request is over by 1, 2, … 7: ⌊log2(1 + over / 2)⌋ steps.
    let steps = [
        None,
        Some(16),
        Some(20),
        Some(20),
        Some(20),
        Some(20),
        Some(24),
        Some(24),
    ];
    assert_eq!(asked, steps);
    // What an unpaid request is asked then, as the last one said.
    let unpaid = s.request("a", rising, Payment::Unpaid, false);
    assert_eq!(unpaid.bits(), Some(24));
}

#[test]
fn an_admitted_requests_next_challenge_is_priced_from_its_limits_refusals_as_its_429_is() {
    // 4 max=8 under 2 a minute, strikes off (the refusals alone raise the
    // price): 7 refused, then the window slides (issue 36, item 4b).
    let rising = Rules {
        difficulty: DifficultyRule::rising(Difficulty::hex(4), Difficulty::hex(8)),
        breaker: BreakerRules::default(),
        ..rules()
    };
    let mut s = FakeStore::default();
    for _ in 0..9 {
        s.request("a", rising, Payment::Unpaid, false);
    }
    s.store.at(60_000);
    let first = s.request("a", rising, Payment::Unpaid, false);
    assert_eq!(
        (status(&first), first.next),
        (200, None),
        "one left: none sent"
    );
    let last = s.request("a", rising, Payment::Unpaid, false);
    let refused = s.request("a", rising, Payment::Unpaid, false);
    // ⌊log2(1 + 8 / 2)⌋ = 2 steps: 24 bits, not the 16 of a fresh client.
    assert_eq!(refused.bits(), Some(24));
    assert_eq!((status(&last), last.next), (200, refused.bits()));
}

#[test]
fn pay_ahead_off_dry_runs_and_refusals_send_no_next_challenge() {
    let off = Rules {
        pay_ahead: false,
        ..rules()
    };
    let mut s = FakeStore::default();
    for _ in 0..2 {
        assert_eq!(s.request("a", off, Payment::Unpaid, false).next, None);
    }
    assert_eq!(s.request("a", off, ahead(1), false).next, None);
    let dry = Rules {
        dry_run: true,
        ..rules()
    };
    let mut s = FakeStore::default();
    for _ in 0..3 {
        assert_eq!(s.request("a", dry, Payment::Unpaid, false).next, None);
    }
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    for payment in [Payment::Unpaid, WRONG] {
        assert_eq!(s.get("a", payment).next, None, "a refusal sends its own");
    }
}

#[test]
fn a_client_paying_ahead_with_requests_in_flight_is_never_blocked() {
    // 4 in flight (strikes 5: at most n - 1), every one paid ahead.
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    for n in 0..60u8 {
        let end = s.get("a", ahead(n));
        assert_eq!(status(&end), 200, "request {n}");
    }
    assert_eq!(s.strikes("a"), 0);
}

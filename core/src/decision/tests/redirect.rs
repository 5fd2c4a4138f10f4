//! A request decided again after an internal redirect (`redirect`): the
//! policy it reaches decides it as any other request, except that a
//! request that paid under the policy before is no offence here.

use super::*;

#[test]
fn a_request_that_paid_before_a_redirect_passes_under_this_limit_as_any_other() {
    let mut s = FakeStore::default();
    let end = s.get("a", Payment::PaidBefore);
    assert_eq!((status(&end), end.outcome), (200, Outcome::Pass));
    assert_eq!(s.calls(), ["check"]);
}

#[test]
fn over_this_limit_a_request_that_paid_before_gets_a_429_that_counts_no_strike() {
    let mut s = FakeStore::default();
    statuses(&mut s, "a", Payment::Unpaid, 2);
    for _ in 0..10 {
        let end = s.get("a", Payment::PaidBefore);
        assert_eq!((status(&end), end.outcome), (429, Outcome::Challenge));
        assert!(!end.struck, "no strike: its token is no offence elsewhere");
    }
    assert_eq!(s.strikes("a"), 0, "never blocked for paying");
    let unpaid = s.get("a", Payment::Unpaid);
    assert!(
        unpaid.struck,
        "a request that paid nothing is struck as ever"
    );
}

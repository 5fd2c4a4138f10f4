//! An admitted request's verdict reports its limit's refusals
//! (`Verdict::over`) where the next challenge is priced from them (no
//! request left after it, or it carries a solution: SPEC §4, "Paying
//! ahead"), counted as its 429 would count them: its own `key=`'s, after
//! a wait's refusal was taken back. Elsewhere 0.

use super::*;

/// 2 a second, strikes off: only refusals raise a price.
fn two_a_second() -> Subject<'static> {
    Subject {
        limits: kept(Limits::one(RateLimit {
            requests: 2,
            window_ms: 1_000,
        })),
        ..subject(BreakerRules::default())
    }
}

/// What a check at `at` reports: (allowed, remaining, over).
fn at(s: &mut MemoryStore, at: u64, op: Op, on: &Subject) -> (bool, u32, u32) {
    let v = checked(s.at(at).ask(op, on)).verdict;
    (v.allowed, v.remaining, v.over)
}

#[test]
fn an_admitted_request_reports_its_limits_refusals_where_a_price_follows_and_0_elsewhere() {
    let mut s = MemoryStore::default();
    let on = two_a_second();
    let rows = [
        (0, OFFENCE, (true, 1, 0)),
        (0, OFFENCE, (true, 0, 0)),
        (0, OFFENCE, (false, 0, 1)),
        (0, PAID, (false, 0, 2)),
        (0, OFFENCE, (false, 0, 3)),
        // The window slid: a paid request reports the 3 refusals, one
        // that leaves a request free and carries no solution nothing, and
        // the one that leaves none the 3 again.
        (1_000, PAID, (true, 1, 3)),
        (1_010, OFFENCE, (true, 0, 3)),
        (1_020, OFFENCE, (false, 0, 4)),
    ];
    for (i, (t, op, want)) in rows.into_iter().enumerate() {
        assert_eq!(at(&mut s, t, op, &on), want, "row {i}");
    }
    let mut fresh = MemoryStore::default();
    assert_eq!(at(&mut fresh, 0, OFFENCE, &on), (true, 1, 0));
}

/// 2 a second site-wide (`key=site`), strikes off.
fn site(client: &[u8]) -> Subject<'_> {
    let mut limits = Limits::NONE;
    let limit = RateLimit {
        requests: 2,
        window_ms: 1_000,
    };
    let key = Some(crate::limiter::KeyId::of("site"));
    limits.push_keyed(limit, None, key).unwrap();
    Subject {
        key: client,
        limits: kept(limits),
        key_values: kept([Some(&b"site"[..])]),
        ..subject(BreakerRules::default())
    }
}

#[test]
fn a_site_wide_key_far_over_its_limit_prices_the_next_challenge_of_a_fresh_client() {
    let mut s = MemoryStore::default();
    for i in 0..30u8 {
        s.at(0).ask(OFFENCE, &site(&[b'c', i]));
    }
    assert_eq!(at(&mut s, 0, OFFENCE, &site(b"x")), (false, 0, 29));
    assert_eq!(at(&mut s, 1_000, OFFENCE, &site(b"y")), (true, 1, 0));
    assert_eq!(
        at(&mut s, 1_000, OFFENCE, &site(b"y")),
        (true, 0, 29),
        "a client never refused, its last free request: the site's 29"
    );
    assert_eq!(at(&mut s, 1_000, OFFENCE, &site(b"y")), (false, 0, 30));
}

#[test]
fn a_refusal_a_wait_took_back_no_longer_counts_towards_the_next_price() {
    let mut s = MemoryStore::default();
    let on = per_second();
    s.at(0).ask(OFFENCE, &on);
    for _ in 0..3 {
        s.at(10).ask(OFFENCE, &on);
    }
    assert_eq!(s.strikes(KEY), 3);
    let c = checked(s.at(1_100).ask(OFFENCE, &on));
    assert_eq!(
        (c.verdict.allowed, c.verdict.remaining, c.verdict.over),
        (true, 0, 2),
        "admitted after the wait: 3 refusals, one taken back"
    );
    assert_eq!(s.strikes(KEY), 2);
    let next = checked(s.at(1_110).ask(OFFENCE, &on)).verdict;
    assert_eq!(
        (next.allowed, next.over),
        (false, 3),
        "its 429 counts one more"
    );
}

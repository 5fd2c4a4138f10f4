//! Local refusals: never past `T`, the headers Redis would have sent, and
//! the batching arithmetic.

use super::*;
use crate::limiter::breaker::StrikeRule;

const STRIKES_5: BreakerRules = BreakerRules {
    strikes: Some(StrikeRule {
        threshold: 5,
        ttl_ms: 60_000,
    }),
    ban: None,
};

fn redis_refused(retry_after_ms: u64, reset_after_ms: u64, over: u32) -> Verdict {
    Verdict {
        allowed: false,
        remaining: 0,
        reset_after_ms,
        retry_after_ms,
        over,
    }
}

fn learnt(asked_ms: u64, retry_after_ms: u64, strikes: u32) -> Refusal {
    let mut r = Refusal::default();
    let breaker = BreakerStatus {
        strikes,
        ..BreakerStatus::default()
    };
    r.learn(
        &redis_refused(retry_after_ms, retry_after_ms, 1),
        &breaker,
        asked_ms,
    );
    r
}

#[test]
fn refused_just_before_t_and_never_at_or_after_it() {
    let mut r = learnt(1_000, 500, 0);
    assert_eq!(r.until_ms, 1_500);
    assert!(r.refuse(BreakerRules::default(), 1_499).is_some());
    assert!(r.refuse(BreakerRules::default(), 1_500).is_none());
    assert!(r.refuse(BreakerRules::default(), 1_501).is_none());
    assert!(!r.holds(1_500));
}

#[test]
fn t_counts_from_when_the_check_was_sent_not_when_the_reply_came() {
    // Redis read its clock at or after 1_000: a slot frees at 1_000 + 500
    // or later, so the node stops refusing at 1_500 at the latest.
    let r = learnt(1_000, 500, 0);
    assert_eq!(r.until_ms, 1_500);
}

#[test]
fn a_local_refusal_carries_the_headers_redis_would_have_sent() {
    let mut r = Refusal::default();
    // Redis: a slot frees in 800 ms, the oldest entry leaves in 300 ms.
    r.learn(
        &redis_refused(800, 300, 3),
        &BreakerStatus::default(),
        10_000,
    );
    let got = r.refuse(BreakerRules::default(), 10_100).unwrap().checked;
    assert_eq!(
        got.verdict,
        Verdict {
            allowed: false,
            remaining: 0,
            reset_after_ms: 200,
            retry_after_ms: 700,
            over: 4,
        }
    );
    // Strikes off: no strike, nothing struck.
    assert!(!got.struck);
    assert_eq!(got.breaker, BreakerStatus::default());
}

#[test]
fn every_local_refusal_is_a_strike_and_raises_over_as_redis_would() {
    let mut r = learnt(0, 10_000, 1);
    let mut last = 0;
    for n in 1..=3u32 {
        let got = r.refuse(STRIKES_5, 5).unwrap();
        assert!(got.checked.struck);
        assert_eq!(got.checked.breaker.strikes, 1 + n);
        assert_eq!(got.checked.verdict.over, 1 + n);
        assert!(got.checked.verdict.over > last);
        last = got.checked.verdict.over;
        assert!(!got.opened);
    }
    assert_eq!(r.unsent, 3);
}

#[test]
fn the_strike_that_reaches_the_threshold_opens_the_breaker_here() {
    let mut r = learnt(0, 10_000, 3);
    assert!(!r.refuse(STRIKES_5, 1).unwrap().opened);
    let fifth = r.refuse(STRIKES_5, 2).unwrap();
    assert!(fifth.opened);
    assert_eq!(fifth.checked.breaker.strikes, 5);
    assert_eq!(fifth.checked.breaker.tripped, Some(Tripped::Opened));
}

#[test]
fn what_redis_acknowledged_is_rebased_and_the_unsent_rest_stays_added() {
    let mut r = learnt(0, 10_000, 0);
    for _ in 0..5 {
        r.refuse(BreakerRules::default(), 1);
    }
    assert_eq!((r.unsent, r.over), (5, 6));
    // Redis took 3 of them; with another node's it now counts 10 refusals.
    r.acknowledged(3, 10, 7);
    assert_eq!((r.unsent, r.over, r.strikes), (2, 12, 9));
    // A new refusal from Redis keeps the two unsent.
    r.learn(&redis_refused(100, 100, 11), &BreakerStatus::default(), 50);
    assert_eq!((r.unsent, r.over), (2, 13));
    r.forgiven(4);
    assert_eq!(r.strikes, 6);
}

#[test]
fn a_batch_holds_each_refusal_once_until_acknowledged() {
    let mut b: Batches<&str> = Batches::default();
    b.add(b"a", || "ctx");
    b.add(b"a", || unreachable!());
    assert_eq!(b.due(), vec![b"a".to_vec()]);
    let (first, ctx) = b.take(b"a").unwrap();
    assert_eq!((first.count, ctx), (2, "ctx"));
    // In flight: not sent twice; new refusals wait for the next batch.
    assert!(b.take(b"a").is_none());
    b.add(b"a", || unreachable!());
    assert!(b.due().is_empty());
    assert_eq!(b.unacknowledged(), 3);
    b.acknowledged(b"a", first.seq);
    let (second, _) = b.take(b"a").unwrap();
    assert_eq!(second.count, 1);
    assert!(second.seq > first.seq);
    b.acknowledged(b"a", second.seq);
    assert!(b.is_empty());
}

#[test]
fn a_batch_without_answer_is_resent_as_it_was() {
    let mut b: Batches<()> = Batches::default();
    b.add(b"a", || ());
    let (sent, _) = b.take(b"a").unwrap();
    b.add(b"a", || ());
    b.failed(b"a", sent.seq);
    assert_eq!(b.due(), vec![b"a".to_vec()]);
    let (again, _) = b.take(b"a").unwrap();
    assert_eq!(
        (again.seq, again.count),
        (sent.seq, sent.count),
        "the same batch, which Redis applies once"
    );
    // A stale acknowledgement changes nothing.
    b.acknowledged(b"a", sent.seq + 7);
    assert_eq!(b.unacknowledged(), 2);
    b.acknowledged(b"a", sent.seq);
    assert_eq!(b.unacknowledged(), 1);
    assert_eq!(b.drop_all(), 1);
    assert!(b.is_empty());
}

#[test]
fn clients_and_limits_batch_apart() {
    let l = |requests| RateLimit {
        requests,
        window_ms: 1_000,
    };
    assert_ne!(
        refusal_key(l(1), false, b"a"),
        refusal_key(l(2), false, b"a")
    );
    assert_ne!(
        refusal_key(l(1), false, b"a"),
        refusal_key(l(1), true, b"a")
    );
    assert_ne!(
        refusal_key(l(1), false, b"a"),
        refusal_key(l(1), false, b"b")
    );
}

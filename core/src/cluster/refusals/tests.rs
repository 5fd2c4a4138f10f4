//! Local refusals: never past `T`, the headers Redis would have sent, and
//! the batching arithmetic.

use super::*;
use crate::limiter::breaker::{opened_block, Block, StrikeRule, Tripped};
use crate::limiter::RateLimit;

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
        limit: 0,
    }
}

fn learnt(asked_ms: u64, retry_after_ms: u64, strikes: u32) -> LocalRefusal {
    let mut r = LocalRefusal::default();
    let breaker = BreakerStatus {
        strikes,
        ..BreakerStatus::default()
    };
    r.learn(
        &redis_refused(retry_after_ms, retry_after_ms, 1),
        &breaker,
        asked_ms,
    )
    .unwrap();
    r
}

#[test]
fn refused_just_before_t_and_never_at_or_after_it() {
    let mut r = learnt(1_000, 500, 0);
    r.acknowledged(0, 0, 0, 1_400);
    assert!(r
        .refuse(BreakerRules::default(), 1_499, (false, true), true)
        .is_some());
    assert!(r
        .refuse(BreakerRules::default(), 1_500, (false, true), true)
        .is_none());
    assert!(r
        .refuse(BreakerRules::default(), 1_501, (false, true), true)
        .is_none());
    assert!(!r.holds(1_500));
}

#[test]
fn t_counts_from_when_the_check_was_sent_not_when_the_reply_came() {
    // Redis read its clock at or after 1_000: a slot frees at 1_000 + 500
    // or later, so the node stops refusing at 1_500 at the latest.
    let mut r = LocalRefusal::default();
    let t = r.learn(
        &redis_refused(500, 500, 1),
        &BreakerStatus::default(),
        1_000,
    );
    assert_eq!(t, Some(1_500));
}

#[test]
fn a_refusal_whose_reset_is_far_before_t_is_not_kept() {
    // (The limit was lowered while the window held requests.)
    let mut r = LocalRefusal::default();
    let far = redis_refused(100_000, 1_000, 1);
    assert_eq!(r.learn(&far, &BreakerStatus::default(), 0), None);
}

#[test]
fn redis_is_asked_again_once_its_word_is_older_than_fresh_ms() {
    let mut r = learnt(0, 10_000, 0);
    assert!(r
        .refuse(STRIKES_5, FRESH_MS - 1, (false, true), true)
        .is_some());
    assert!(r.refuse(STRIKES_5, FRESH_MS, (false, true), true).is_none());
    // Still refused while Redis owes the node an answer (or is down).
    assert!(r
        .clone()
        .refuse(STRIKES_5, FRESH_MS, (true, true), true)
        .is_some());
    // A batch's answer renews it.
    r.acknowledged(1, 2, 0, FRESH_MS);
    assert!(r
        .refuse(STRIKES_5, FRESH_MS + 1, (false, true), true)
        .is_some());
}

#[test]
fn t_survives_the_32_bit_wrap_of_the_monotonic_clock() {
    let mut r = LocalRefusal::default();
    let asked = u64::from(u32::MAX) - 100;
    r.learn(
        &redis_refused(500, 500, 1),
        &BreakerStatus::default(),
        asked,
    );
    assert!(r
        .refuse(BreakerRules::default(), asked + 200, (false, true), true)
        .is_some());
    assert_eq!(
        r.refuse(BreakerRules::default(), asked + 200, (false, true), true)
            .unwrap()
            .checked
            .verdict
            .retry_after_ms,
        300
    );
    assert!(r
        .refuse(BreakerRules::default(), asked + 500, (false, true), true)
        .is_none());
}

#[test]
fn a_local_refusal_carries_the_headers_redis_would_have_sent() {
    let mut r = LocalRefusal::default();
    // Redis: a slot frees in 800 ms, the oldest entry leaves in 300 ms.
    r.learn(
        &redis_refused(800, 300, 3),
        &BreakerStatus::default(),
        10_000,
    );
    let got = r
        .refuse(BreakerRules::default(), 10_100, (false, true), true)
        .unwrap()
        .checked;
    assert_eq!(
        got.verdict,
        Verdict {
            allowed: false,
            remaining: 0,
            reset_after_ms: 200,
            retry_after_ms: 700,
            over: 4,
            limit: 0,
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
    // (within FRESH_MS of Redis's word)
    for n in 1..=3u32 {
        let got = r.refuse(STRIKES_5, 5, (false, true), true).unwrap();
        assert!(got.checked.struck);
        assert_eq!(got.checked.breaker.strikes, 1 + n);
        assert_eq!(got.checked.verdict.over, 1 + n);
        assert!(got.checked.verdict.over > last);
        last = got.checked.verdict.over;
    }
    assert_eq!(r.unsent, 3);
}

#[test]
fn the_strike_that_would_reach_the_threshold_is_left_to_redis() {
    // (Spends on other nodes may have taken back strikes this node counts.)
    let mut r = learnt(0, 10_000, 3);
    assert_eq!(
        r.refuse(STRIKES_5, 1, (false, true), true)
            .unwrap()
            .checked
            .breaker
            .strikes,
        4
    );
    assert!(r.refuse(STRIKES_5, 2, (false, true), true).is_none());
    assert_eq!(r.unsent, 1);
    // Redis down: not refused here (`pow_shield_fail`, through the
    // fallback rule, decides every request while Redis is down), and
    // nothing counted.
    assert!(r.refuse(STRIKES_5, 2, (true, false), true).is_none());
    assert_eq!(r.unsent, 1);
}

#[test]
fn what_redis_acknowledged_is_rebased_and_the_unsent_rest_stays_added() {
    let mut r = learnt(0, 10_000, 0);
    for _ in 0..5 {
        r.refuse(BreakerRules::default(), 1, (false, true), true);
    }
    assert_eq!((r.unsent, r.over), (5, 6));
    // Redis took 3 of them; with another node's it now counts 10 refusals.
    r.acknowledged(3, 10, 7, 2);
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
    b.add(b"a", 2, || "ctx");
    let (first, ctx) = b.take(b"a", 0).unwrap();
    assert_eq!((first.total, ctx), (2, "ctx"));
    // On its way: nothing new to send; refusals taken later go in a
    // second call while the first is still on its way.
    assert_eq!(b.in_flight(), 1);
    assert!(b.take(b"a", 0).is_none());
    b.add(b"a", 1, || unreachable!());
    let (second, _) = b.take(b"a", 0).unwrap();
    assert_eq!((second.run, second.total), (first.run, 3));
    assert_eq!(b.unacknowledged(), 3);
    // Answers in any order acknowledge each refusal once.
    assert_eq!(b.acknowledged(b"a", second), 3);
    assert_eq!(b.acknowledged(b"a", first), 0);
    assert_eq!(b.unacknowledged(), 0);
    assert!(b.take(b"a", 0).is_none());
    b.settle(b"a");
    assert!(b.is_empty());
    // A new batch is a new run: Redis starts its total over.
    b.add(b"a", 1, || "ctx");
    let (third, _) = b.take(b"a", 0).unwrap();
    assert_eq!(third.total, 1);
    assert!(third.run > first.run);
}

#[test]
fn a_call_without_answer_is_covered_by_the_next() {
    let mut b: Batches<()> = Batches::default();
    b.add(b"a", 1, || ());
    let (sent, _) = b.take(b"a", 0).unwrap();
    b.add(b"a", 1, || ());
    b.failed(b"a", sent);
    assert_eq!(b.in_flight(), 0);
    let (again, _) = b.take(b"a", 0).unwrap();
    assert_eq!(
        (again.run, again.total),
        (sent.run, 2),
        "the running total, all of it"
    );
    // A call overtaken by one that failed: the failed one's total goes again.
    b.add(b"a", 1, || ());
    let (third, _) = b.take(b"a", 0).unwrap();
    b.failed(b"a", third);
    assert_eq!(b.acknowledged(b"a", again), 2);
    assert_eq!(b.unacknowledged(), 1);
    b.settle(b"a");
    assert!(!b.is_empty(), "unacknowledged refusals are never dropped");
    assert_eq!(b.take(b"a", 0).map(|(s, _)| s.total), Some(3));
    assert_eq!(b.drop_all(), 1);
    assert!(b.is_empty());
}

#[test]
fn every_worker_takes_what_the_zone_holds_once() {
    let mut r = learnt(0, 10_000, 0);
    for now in 1..=3 {
        assert!(r.refuse(STRIKES_5, now, (false, true), true).is_some());
    }
    assert_eq!((r.pending, r.unsent, r.strikes), (3, 3, 3));
    assert!(!r.disposable());
    assert_eq!(r.take_pending(), 3);
    assert_eq!(r.take_pending(), 0, "taken by one worker only");
    assert!(r.disposable());
    // Taken is not acknowledged: the counts stay until Redis has them.
    assert_eq!(r.unsent, 3);
    r.acknowledged(3, 0, 3, 10);
    assert_eq!((r.unsent, r.strikes), (0, 3));
}

#[test]
fn a_released_refusal_asks_redis_and_keeps_its_counts() {
    let mut r = learnt(0, 10_000, 0);
    assert!(r.refuse(STRIKES_5, 1, (false, true), true).is_some());
    r.release(1);
    assert!(!r.holds(2));
    assert!(r.refuse(STRIKES_5, 2, (true, true), true).is_none());
    assert_eq!(r.take_pending(), 1);
}

#[test]
fn clients_and_limits_batch_apart() {
    let l = |requests| RateLimit {
        requests,
        window_ms: 1_000,
    };
    assert_ne!(
        refusal_key(7, l(1), false, b"a"),
        refusal_key(7, l(2), false, b"a")
    );
    assert_ne!(
        refusal_key(7, l(1), false, b"a"),
        refusal_key(7, l(1), true, b"a")
    );
    assert_ne!(
        refusal_key(7, l(1), false, b"a"),
        refusal_key(7, l(1), false, b"b")
    );
}

fn limit(requests: u32, window_ms: u64) -> RateLimit {
    RateLimit {
        requests,
        window_ms,
    }
}

#[test]
fn distinct_scopes_limits_and_counters_never_share_a_refusal() {
    use std::collections::HashSet;
    let scopes = [
        scope(&[b"127.0.0.1:6379", b"pow:"]),
        scope(&[b"127.0.0.1:6380", b"pow:"]),
    ];
    let limits = [
        limit(1, 1_000),
        limit(2, 1_000),
        limit(1, 2_000),
        // Where the window's bits meet the requests'.
        limit(1, 4_194_303_000),
        limit(2, 1_000),
        limit(1_000_000, 86_400_000),
        limit(1_000_000, 86_399_000),
        limit(999_999, 86_400_000),
        limit(u32::MAX, 4_194_303_000),
        // Never parsed (not whole seconds; too long): hashed.
        limit(1, 1_500),
        limit(1, 4_194_304_000),
        limit(u32::MAX, u64::MAX),
    ];
    let mut seen = HashSet::new();
    for scope in scopes {
        for (i, &limit) in limits.iter().enumerate() {
            for approx in [false, true] {
                let key = refusal_key(scope, limit, approx, b"\x00192.0.2.1");
                // (limits[4] repeats limits[1]: the same key.)
                assert_eq!(seen.insert(key), i != 4, "{scope:x} {limit:?} {approx}");
            }
        }
    }
}

#[test]
fn every_limit_a_configuration_accepts_has_its_own_refusals() {
    use crate::config::values::{MAX_LIMIT_REQUESTS, MAX_LIMIT_WINDOW_MS};
    use std::collections::HashSet;
    let s = scope(&[b"redis:6379", b"pow:"]);
    let requests = [
        1,
        2,
        3,
        10,
        999,
        1_000,
        65_535,
        65_536,
        999_999,
        MAX_LIMIT_REQUESTS,
    ];
    let windows = [1, 2, 59, 60, 3_600, 86_399].map(|s| s * 1_000);
    let mut seen = HashSet::new();
    for r in requests {
        for w in windows.into_iter().chain([MAX_LIMIT_WINDOW_MS]) {
            for approx in [false, true] {
                let key = refusal_key(s, limit(r, w), approx, b"k");
                assert_eq!(&key[REFUSAL_PREFIX..], b"k");
                assert!(seen.insert(key), "{r} {w} {approx}");
            }
        }
    }
}

#[test]
fn the_common_client_keys_refusals_stay_inline_in_the_zone() {
    use crate::limiter::client::{client_id, client_net, DEFAULT_KEY_MARK, OWN_KEY};
    use crate::store::INLINE_KEY;
    let widest_v4 = "255.255.255.255".parse().ok();
    let widest_v6 = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().ok();
    let default_key = |peer| [&[DEFAULT_KEY_MARK], client_id(peer).as_bytes()].concat();
    let net_value = |peer| [OWN_KEY, client_net(peer).as_bytes()].concat();
    let cases: [(&str, Vec<u8>); 5] = [
        ("default key, IPv4", default_key(widest_v4)),
        ("default key, IPv6 /64", default_key(widest_v6)),
        ("key=$pow_shield_net, /24", net_value(widest_v4)),
        ("key=$pow_shield_net, /48", net_value(widest_v6)),
        ("key=site", [OWN_KEY, b"site"].concat()),
    ];
    let l = limit(1_000_000, 86_400_000);
    for (what, key) in cases {
        let refusal = refusal_key(scope(&[b"r", b"p"]), l, true, &key);
        assert!(refusal.len() <= INLINE_KEY, "{what}: {refusal:?}");
    }
}

#[test]
fn the_strike_that_trips_leaves_a_block_for_the_node_to_keep() {
    use crate::limiter::breaker::BanRule;
    let tripped = |t| BreakerStatus {
        strikes: 5,
        tripped: t,
        ..BreakerStatus::default()
    };
    assert_eq!(opened_block(&tripped(None), STRIKES_5), None);
    let b = opened_block(&tripped(Some(Tripped::Opened)), STRIKES_5).unwrap();
    assert_eq!(
        (b.block, b.block_ms, b.strikes),
        (Block::Blocked, 60_000, 5)
    );
    let banning = BreakerRules {
        ban: Some(BanRule {
            after: 3,
            ttl_ms: 86_400_000,
        }),
        ..STRIKES_5
    };
    let b = opened_block(&tripped(Some(Tripped::Banned)), banning).unwrap();
    assert_eq!((b.block, b.block_ms), (Block::Banned, 86_400_000));
}

#[test]
fn refusals_of_another_redis_or_prefix_never_apply() {
    let l = RateLimit {
        requests: 1,
        window_ms: 1_000,
    };
    let a = scope(&[b"127.0.0.1:6379", b"pow:"]);
    assert_ne!(a, scope(&[b"127.0.0.1:6379", b"v2:"]));
    assert_ne!(a, scope(&[b"127.0.0.1:6379p", b"ow:"]));
    assert_ne!(
        refusal_key(a, l, false, b"k"),
        refusal_key(a + 1, l, false, b"k")
    );
}

#[test]
fn without_strikes_or_rising_difficulty_nothing_is_left_to_send() {
    // Redis reads a refusal count only for rising difficulty, and strikes
    // only with a breaker: with neither, a local refusal costs Redis nothing.
    let mut r = learnt(0, 10_000, 0);
    let got = r
        .refuse(BreakerRules::default(), 1, (false, true), false)
        .unwrap();
    assert!(!got.checked.struck);
    assert_eq!((r.pending, r.unsent), (0, 0));
    assert!(r.disposable());
    // ... and Redis's word never goes stale: only `T` ends the refusal.
    assert!(r
        .refuse(BreakerRules::default(), FRESH_MS + 1, (false, true), false)
        .is_some());
    // (Nor with a rising price only: each batch's answer brings the count.)
    // With rising difficulty the count goes to Redis.
    r.refuse(BreakerRules::default(), 2, (false, true), true)
        .unwrap();
    assert_eq!((r.pending, r.unsent), (1, 1));
    assert!(r
        .refuse(BreakerRules::default(), FRESH_MS + 1, (false, true), true)
        .is_some());
    assert!(
        r.refuse(STRIKES_5, FRESH_MS + 1, (false, true), false)
            .is_none(),
        "with strikes, Redis is asked again"
    );
}

#[test]
fn batches_without_strikes_go_at_the_slower_pace() {
    let mut b: Batches<u64> = Batches::default();
    b.add(b"strikes", 1, || 0);
    b.add(b"price", 1, || PRICE_BATCH_MS);
    let every = |c: &u64| *c;
    assert_eq!(b.due(0, every).len(), 2, "a new batch goes at once");
    for key in [&b"strikes"[..], b"price"] {
        let (sent, _) = b.take(key, 50).unwrap();
        b.acknowledged(key, sent);
        b.take_more(key, 1);
    }
    let bytes = |keys: Vec<RefusalKey>| keys.iter().map(|k| k.to_vec()).collect::<Vec<_>>();
    assert_eq!(bytes(b.due(150, every)), vec![b"strikes".to_vec()]);
    let mut later = bytes(b.due(50 + PRICE_BATCH_MS, every));
    later.sort();
    assert_eq!(later, vec![b"price".to_vec(), b"strikes".to_vec()]);
}

#[test]
fn without_strikes_redis_is_asked_again_two_seconds_after_its_check() {
    // A refusal until an hour from now: a flush or a generation change
    // reaches the node within QUIET_FRESH_MS, not at T.
    let mut r = learnt(1_000, 3_600_000, 0);
    r.acknowledged(0, 0, 0, 2_900);
    let quiet = BreakerRules::default();
    assert!(r.refuse(quiet, 2_999, (false, true), false).is_some());
    assert!(
        r.refuse(quiet, 1_000 + QUIET_FRESH_MS, (false, true), true)
            .is_none(),
        "a batch's answer is no check: Redis is asked"
    );
    assert!(r.holds(1_000 + QUIET_FRESH_MS), "T still ahead");
}

#[test]
fn scopes_of_nearby_configurations_differ_in_the_bits_a_refusal_keeps() {
    // A refusal key keeps a scope's low 56 bits: two Redis, databases or
    // prefixes an operator moves between must differ there (FNV alone
    // spreads a last byte's change poorly into the low bits).
    let configurations: [&[&[u8]]; 6] = [
        &[b"127.0.0.1:6379", b"0", b"pow:"],
        &[b"127.0.0.1:6380", b"0", b"pow:"],
        &[b"127.0.0.1:6379", b"1", b"pow:"],
        &[b"127.0.0.1:6379", b"0", b"pow2:"],
        &[b"127.0.0.1:6379", b"0", b"pox:"],
        &[b"127.0.0.2:6379", b"0", b"pow:"],
    ];
    let low = (1u64 << 56) - 1;
    for (i, a) in configurations.iter().enumerate() {
        for b in &configurations[i + 1..] {
            let (sa, sb) = (scope(a), scope(b));
            assert_ne!(sa & low, sb & low, "{a:?} {b:?}");
            // ... and not by a few bits, which two limits' packed bits could
            // make up for.
            assert!(((sa ^ sb) & low).count_ones() > 8, "{a:?} {b:?}");
        }
    }
}

#[test]
fn a_key_values_refusal_key_is_that_of_own_key_and_the_value() {
    let limit = RateLimit {
        requests: 100,
        window_ms: 2_000,
    };
    let long = vec![b'v'; 80];
    for value in [&b"203.0.113.0/24"[..], b"", &long] {
        for approx in [false, true] {
            let whole = [crate::limiter::client::OWN_KEY, value].concat();
            let made = refusal_key_of(7, limit, approx, (crate::limiter::client::OWN_KEY, value));
            assert_eq!(&*made, &*refusal_key(7, limit, approx, &whole));
        }
    }
}

//! Several requests' stacked checks in one call of the stacked script
//! (`Calls::stacks`) on a real Redis: each answered and written as its own
//! stacked call (or, under one `approx` limit, the approx script's call)
//! would; a call after its deadline writes nothing.

use redis_protocol::resp2::types::OwnedFrame;

use super::redis_server::Redis;
use super::{ints, shape};
use crate::cluster::calls::{self, stacks_reply, Calls, Part};
use crate::cluster::keys::ClientKey;
use crate::limiter::breaker::{BreakerRules, StrikeRule};
use crate::limiter::{KeyId, Limit, Limits, RateLimit, MAX_LIMITS};
use crate::redis::clock;
use crate::redis::command::client_tag;
use crate::store::{Offence, Subject};

/// The client's own: 2 a minute, exact.
const OWN: RateLimit = RateLimit {
    requests: 2,
    window_ms: 60_000,
};

/// Its /24's (`key=$pow_shield_net`): 3 an hour, `approx`.
const NET: RateLimit = RateLimit {
    requests: 3,
    window_ms: 3_600_000,
};

/// Another location's one `approx` limit: 2 an hour.
const SITE: RateLimit = RateLimit {
    requests: 2,
    window_ms: 3_600_000,
};

/// Two strikes open the breaker.
const RULES: BreakerRules = BreakerRules {
    strikes: Some(StrikeRule {
        threshold: 2,
        ttl_ms: 60_000,
    }),
    ban: None,
};

/// A request: its client, its /24 (none: the other location's), how many
/// requests it asks before the call compared.
struct Asks {
    client: &'static [u8],
    net: Option<&'static [u8]>,
    before: u32,
}

const fn asks(client: &'static [u8], net: Option<&'static [u8]>, before: u32) -> Asks {
    Asks {
        client,
        net,
        before,
    }
}

/// New (twice in one /24), at its own limit (refused, struck), in a full
/// /24 (refused by it, not struck), under the other location with room
/// and at its limit, blocked; in three sets of shared arguments.
const REQUESTS: [Asks; 7] = [
    asks(b"a", Some(b"n1"), 0),
    asks(b"b", Some(b"n1"), 0),
    asks(b"full", Some(b"n3"), 2),
    asks(b"c", Some(b"n2"), 0),
    asks(b"x", None, 1),
    asks(b"y", None, 2),
    asks(b"blocked", Some(b"n4"), 4),
];

/// Addresses that use up /24 `n2` first.
const FILLERS: [&[u8]; 3] = [b"c0", b"c1", b"c2"];

fn stacked_limits() -> Limits {
    let mut limits = Limits::default();
    limits.add(Limit::new(OWN)).expect("one");
    let net = Limit::new(NET).approx().keyed(KeyId::of("$pow_shield_net"));
    limits.add(net).expect("two");
    limits
}

/// What Redis holds under `prefix` but the slots' generations (made by
/// the first refusal of each prefix: the calls compared differ there).
fn counts(state: Vec<(String, String)>) -> Vec<(String, String)> {
    state
        .into_iter()
        .filter(|(k, _)| !k.starts_with("gen:"))
        .collect()
}

/// The client's own limit (`own`), then its /24's, exact or `approx`.
fn net_limits(net_approx: bool, own: bool) -> Limits {
    let mut limits = Limits::default();
    if own {
        limits.add(Limit::new(OWN)).expect("one");
    }
    let net = match net_approx {
        true => Limit::new(NET).approx(),
        false => Limit::new(NET),
    };
    limits
        .add(net.keyed(KeyId::of("$pow_shield_net")))
        .expect("two");
    limits
}

/// The part of one request of `client` (in /24 `net`, else under the
/// other location).
fn part(calls: &Calls, client: &[u8], net: Option<&[u8]>) -> Part {
    let tag = client_tag(client);
    match net {
        Some(net) => {
            let limits = Box::leak(Box::new(stacked_limits()));
            let values = Box::leak(Box::new([None, Some(net.to_vec().leak() as &[u8])]));
            let subject = Subject {
                key: client,
                limits,
                key_values: values,
                rules: RULES,
                rising: false,
            };
            calls.whole(tag.as_bytes(), &subject, Offence::Unpaid)
        }
        None => Part::approx(tag.as_bytes(), SITE, RULES, Offence::Unpaid),
    }
}

/// The one request's own call: the stacked script's, or the approx one's.
fn alone(calls: &Calls, part: &Part, seq: u64) -> Vec<u8> {
    calls.alone(part, seq).evalsha
}

/// Everything Redis holds under `prefix`, each key by its name after the
/// prefix: a log's size, a counter's counts, a string's value.
fn state(redis: &mut Redis, prefix: &str) -> Vec<(String, String)> {
    let pattern = format!("{prefix}*");
    let OwnedFrame::Array(names) = redis.call(&[b"KEYS", pattern.as_bytes()]) else {
        panic!("KEYS");
    };
    let mut out: Vec<(String, String)> = names
        .iter()
        .map(|n| {
            let OwnedFrame::BulkString(name) = n else {
                panic!("{n:?}");
            };
            let value = match redis.call(&[b"TYPE", name]) {
                OwnedFrame::SimpleString(t) if t == b"zset" => {
                    format!("{:?}", redis.call(&[b"ZCARD", name]))
                }
                OwnedFrame::SimpleString(t) if t == b"hash" => {
                    format!("{:?}", redis.call(&[b"HMGET", name, b"c", b"p"]))
                }
                _ => format!("{:?}", redis.call(&[b"GET", name])),
            };
            (
                String::from_utf8_lossy(&name[prefix.len()..]).into_owned(),
                value,
            )
        })
        .collect();
    out.sort();
    out
}

fn each_request_is_answered_and_written_as_its_own_stacked_call_would(cluster: bool) {
    let test = format!("stacks_as_stacked_{cluster}");
    let Some((mut redis, a, b)) = super::alone_and_together(&test, "stacks", cluster) else {
        return;
    };
    let (one, together) = (a.prefix().to_owned(), b.prefix().to_owned());
    let mut seq = 1;
    let mut before = |client: &[u8], net, n| {
        for _ in 0..n {
            for calls in [&a, &b] {
                redis.raw(&alone(calls, &part(calls, client, net), seq));
            }
            seq += 1;
        }
    };
    for filler in FILLERS {
        before(filler, Some(b"n2"), 1);
    }
    for r in &REQUESTS {
        before(r.client, r.net, r.before);
    }
    // Each on its own, then all in one call.
    let parts_a: Vec<Part> = REQUESTS.iter().map(|r| part(&a, r.client, r.net)).collect();
    let alone_replies: Vec<Vec<i64>> = parts_a
        .iter()
        .enumerate()
        .map(|(i, p)| ints(&redis.raw(&alone(&a, p, 100 + i as u64))))
        .collect();
    let parts_b: Vec<Part> = REQUESTS.iter().map(|r| part(&b, r.client, r.net)).collect();
    let of: Vec<(&Part, u64)> = parts_b.iter().zip(100..).collect();
    let frame = redis.raw(&b.stacks(&of).evalsha);
    let OwnedFrame::BulkString(text) = &frame else {
        panic!("{frame:?}");
    };
    let together_replies = stacks_reply(text, REQUESTS.len(), cluster).expect("a reply each");
    for (i, p) in parts_a.iter().enumerate() {
        let (x, y) = (&alone_replies[i], &together_replies[i]);
        assert_eq!(x.len(), y.len(), "{i}");
        assert_eq!(shape(&x[..9]), shape(&y[..9]), "request {i}: {x:?} {y:?}");
        // Each read as the node reads its own call's reply.
        let at = [0; MAX_LIMITS];
        let (x, y) = match REQUESTS[i].net {
            Some(_) => {
                assert_eq!(x[9], y[9], "request {i}: the deciding limit");
                let read = |r: &[i64]| {
                    let kept = (p, &p.at);
                    calls::stacked_checked(cluster, r, kept, p.rules, p.offence)
                };
                (read(x), read(y))
            }
            None => (
                calls::checked(cluster, x, p, p.rules, p.offence),
                calls::stacked_checked(cluster, y, (p, &at), p.rules, p.offence),
            ),
        };
        let (x, y) = (x.expect("read alone"), y.expect("read together"));
        assert_eq!(
            (
                x.verdict.allowed,
                x.verdict.limit,
                x.struck,
                x.breaker.block
            ),
            (
                y.verdict.allowed,
                y.verdict.limit,
                y.struck,
                y.breaker.block
            ),
            "request {i}"
        );
        // (A Redis Cluster's generation: made by the first refusal of each
        // prefix, so it differs; set exactly where a refusal was.)
        assert_eq!(x.generation.is_some(), y.generation.is_some(), "{i}");
    }
    // (Slots' generations aside: the call's is its first request's slot.)
    assert_eq!(
        counts(state(&mut redis, &one)),
        counts(state(&mut redis, &together))
    );
    // What each was: admitted, admitted, refused by its own limit (struck),
    // by its /24's (not struck), admitted, refused, blocked.
    let admitted: Vec<i64> = together_replies.iter().map(|r| r[0]).collect();
    let by: Vec<i64> = together_replies.iter().map(|r| r[9]).collect();
    let blocks: Vec<i64> = together_replies.iter().map(|r| r[6]).collect();
    assert_eq!(admitted, [1, 1, 0, 0, 1, 0, 0]);
    assert_eq!(&by[2..4], [0, 1]);
    assert_eq!(blocks, [0, 0, 0, 0, 0, 0, 1]);
}

#[test]
fn each_request_of_a_stacks_call_is_answered_and_written_as_its_own_stacked_call_would() {
    each_request_is_answered_and_written_as_its_own_stacked_call_would(false);
}

#[test]
fn a_redis_clusters_stacks_call_answers_its_slots_generation_after_each_refusal() {
    each_request_is_answered_and_written_as_its_own_stacked_call_would(true);
}

#[test]
fn a_stacks_call_after_its_deadline_writes_nothing_for_any_request() {
    let Some((mut redis, calls)) = super::late_calls("stacks_late", "stacks", false) else {
        return;
    };
    let parts = [part(&calls, b"a", Some(b"n1")), part(&calls, b"x", None)];
    let of: Vec<(&Part, u64)> = parts.iter().zip(1..).collect();
    let mut late = calls.stacks(&of).evalsha;
    let past = redis.now_ms() - 1_000;
    assert!(clock::stamp(&mut late, past));
    let frame = redis.raw(&late);
    assert!(clock::expired_ms(&frame).is_some(), "{frame:?}");
    assert_eq!(state(&mut redis, calls.prefix()), []);
    // On time: both counted.
    let mut on_time = calls.stacks(&of).evalsha;
    assert!(clock::stamp(&mut on_time, redis.now_ms() + 60_000));
    assert!(matches!(redis.raw(&on_time), OwnedFrame::BulkString(_)));
    // (a's log, its /24's counter, x's counter)
    assert_eq!(state(&mut redis, calls.prefix()).len(), 3);
}

/// A Redis Cluster's parts of each request (its own exact limit in its
/// slot, or none there: its breaker alone; its /24's count in another
/// slot), each sent by `Calls::alone` and by the stacked script: answered
/// and written the same, read as the node reads each. `own`: the client's
/// own limit too; `asked`: (client, /24, the client's strikes set to the
/// threshold first); `fates`: each part's (admitted, limit, struck).
fn each_part_alone_is_answered_and_written_as_the_stacked_script_would(
    (net_approx, own): (bool, bool),
    asked: &[(&[u8], &[u8], bool)],
    fates: &[[(bool, u8, bool); 2]],
) {
    let test = format!("parts_alone_{net_approx}_{own}");
    // (Each variant under prefixes of its own: the tests run at once.)
    let Some((mut redis, a, b)) = super::alone_and_together(&test, &test, true) else {
        return;
    };
    let limits = net_limits(net_approx, own);
    let stacked = &crate::cluster::scripts::Scripts::for_mode(true).stacked;
    let mut got = Vec::new();
    for (seq, &(client, net, block)) in (1..).zip(asked) {
        let values = [None, Some(net)];
        let values = &values[usize::from(!own)..];
        let subject = Subject {
            key: client,
            limits: &limits,
            key_values: values,
            rules: RULES,
            rising: false,
        };
        let tag = client_tag(client);
        if block {
            for calls in [&a, &b] {
                let mut name = Vec::new();
                let (prefix, tag) = (calls.prefix().as_bytes(), tag.as_bytes());
                crate::cluster::keys::write(&mut name, prefix, tag, ClientKey::Strikes);
                redis.call(&[b"SET", &name, b"2", b"PX", b"60000"]);
            }
        }
        let parts_a = a.parts(tag.as_bytes(), &subject, Offence::Unpaid);
        let parts_b = b.parts(tag.as_bytes(), &subject, Offence::Unpaid);
        assert_eq!(parts_a.len(), 2, "the client's slot and its /24's");
        let mut fate = Vec::new();
        for (pa, pb) in parts_a.iter().zip(&parts_b) {
            let call = a.alone(pa, seq);
            assert!(
                call.script != stacked.text,
                "{:?}: a script of its own",
                pa.alone()
            );
            let x = ints(&redis.raw(&call.evalsha));
            let y = ints(&redis.raw(&b.stacked(pb, seq).evalsha));
            let x = calls::part_checked(true, &x, pa, true).expect("read alone");
            let y = calls::part_checked(true, &y, pb, false).expect("read stacked");
            let seen = |c: crate::store::Checked| {
                let v = c.verdict;
                let times = (v.reset_after_ms > 0, v.retry_after_ms > 0);
                let breaker = (c.breaker.strikes, c.breaker.block, c.breaker.tripped);
                let gen = c.generation.is_some();
                (
                    v.allowed,
                    v.limit,
                    v.remaining,
                    v.over,
                    times,
                    c.struck,
                    breaker,
                    gen,
                )
            };
            assert_eq!(seen(x), seen(y), "request {seq}: {pa:?}");
            fate.push((x.verdict.allowed, x.verdict.limit, x.struck));
        }
        got.push(fate);
    }
    assert_eq!(got, fates);
    let (one, other) = (a.prefix().to_owned(), b.prefix().to_owned());
    assert_eq!(
        counts(state(&mut redis, &one)),
        counts(state(&mut redis, &other))
    );
}

const YES: bool = true;
const NO: bool = false;

/// Client `a` twice, then refused by its own limit (struck), `b` refused
/// by the full /24 (not struck), `a` again (the strike that opens the
/// breaker), blocked; `c` of another /24.
const OWN_ASKED: [(&[u8], &[u8], bool); 7] = [
    (b"a", b"n1", NO),
    (b"a", b"n1", NO),
    (b"a", b"n1", NO),
    (b"b", b"n1", NO),
    (b"a", b"n1", NO),
    (b"a", b"n1", NO),
    (b"c", b"n2", NO),
];
const OWN_FATES: [[(bool, u8, bool); 2]; 7] = [
    [(YES, 0, NO), (YES, 1, NO)],
    [(YES, 0, NO), (YES, 1, NO)],
    [(NO, 0, YES), (YES, 1, NO)],
    [(YES, 0, NO), (NO, 1, NO)],
    [(NO, 0, YES), (NO, 1, NO)],
    [(NO, 0, NO), (NO, 1, NO)],
    [(YES, 0, NO), (YES, 1, NO)],
];

#[test]
fn a_redis_clusters_part_of_one_exact_count_alone_is_answered_and_written_as_stacked() {
    let (asked, fates) = (&OWN_ASKED, &OWN_FATES);
    each_part_alone_is_answered_and_written_as_the_stacked_script_would((NO, YES), asked, fates);
}

#[test]
fn a_redis_clusters_part_of_one_approx_count_alone_is_answered_and_written_as_stacked() {
    let (asked, fates) = (&OWN_ASKED, &OWN_FATES);
    each_part_alone_is_answered_and_written_as_the_stacked_script_would((YES, YES), asked, fates);
}

#[test]
fn a_redis_clusters_part_of_the_breaker_alone_is_answered_as_stacked_clear_or_blocked() {
    // Three of the /24's, the fourth refused by it; a client blocked: its
    // part refuses, the /24's admits (the node takes it back).
    let asked: [(&[u8], &[u8], bool); 5] = [
        (b"a", b"n1", NO),
        (b"b", b"n1", NO),
        (b"c", b"n1", NO),
        (b"d", b"n1", NO),
        (b"e", b"n2", YES),
    ];
    let fates = [
        [(YES, 0, NO), (YES, 0, NO)],
        [(YES, 0, NO), (YES, 0, NO)],
        [(YES, 0, NO), (YES, 0, NO)],
        [(YES, 0, NO), (NO, 0, NO)],
        [(NO, 0, NO), (YES, 0, NO)],
    ];
    for net_approx in [NO, YES] {
        each_part_alone_is_answered_and_written_as_the_stacked_script_would(
            (net_approx, NO),
            &asked,
            &fates,
        );
    }
}

/// The /24 parts (another slot's, no breaker) of requests from `asked`
/// (client, its /24, paid), built by `calls`.
fn net_parts(
    calls: &Calls,
    limits: &Limits,
    asked: &[(&'static [u8], &'static [u8], bool)],
) -> Vec<Part> {
    asked
        .iter()
        .map(|&(client, net, paid)| {
            let values: &'static [Option<&'static [u8]>] = Box::leak(Box::new([None, Some(net)]));
            let subject = Subject {
                key: client,
                limits: Box::leak(Box::new(*limits)),
                key_values: values,
                rules: RULES,
                rising: false,
            };
            let offence = match paid {
                true => Offence::None,
                false => Offence::Unpaid,
            };
            let parts = calls.parts(client_tag(client).as_bytes(), &subject, offence);
            parts.into_iter().nth(1).expect("the /24's part")
        })
        .collect()
}

fn requests_of_a_counts_call_are_answered_and_written_as_their_stacked_calls(net_approx: bool) {
    let test = format!("counts_{net_approx}");
    let Some((mut redis, a, b)) = super::alone_and_together(&test, &test, true) else {
        return;
    };
    let limits = net_limits(net_approx, YES);
    // Five of /24 n1 after one of it: a paid one (its refusals read), its
    // last (read too), three refused; one of n2; two sets of shared
    // arguments.
    let asked: [(&[u8], &[u8], bool); 6] = [
        (b"c", b"n1", YES),
        (b"a", b"n1", NO),
        (b"b", b"n1", NO),
        (b"d", b"n1", NO),
        (b"e", b"n1", NO),
        (b"f", b"n2", NO),
    ];
    for calls in [&a, &b] {
        for part in net_parts(calls, &limits, &[(b"z", b"n1", NO)]) {
            redis.raw(&calls.stacked(&part, 90).evalsha);
        }
    }
    let parts_a = net_parts(&a, &limits, &asked);
    let alone: Vec<Vec<i64>> = parts_a
        .iter()
        .zip(100..)
        .map(|(p, seq)| ints(&redis.raw(&a.stacked(p, seq).evalsha)))
        .collect();
    let parts_b = net_parts(&b, &limits, &asked);
    let of: Vec<(&Part, u64)> = parts_b.iter().zip(100..).collect();
    let call = b.counts(&of).expect("each a count without a breaker");
    let frame = redis.raw(&call.evalsha);
    let OwnedFrame::BulkString(text) = &frame else {
        panic!("{frame:?}");
    };
    let together = stacks_reply(text, asked.len(), true).expect("a reply each");
    for (i, (x, y)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(shape(&x[..10]), shape(&y[..10]), "request {i}: {x:?} {y:?}");
        assert_eq!(
            x[10] > 0,
            y[10] > 0,
            "request {i}: a generation after a refusal"
        );
    }
    let admitted: Vec<i64> = together.iter().map(|r| r[0]).collect();
    assert_eq!(admitted, [1, 1, 0, 0, 0, 1]);
    let (one, other) = (a.prefix().to_owned(), b.prefix().to_owned());
    assert_eq!(
        counts(state(&mut redis, &one)),
        counts(state(&mut redis, &other))
    );
    // With a part that has a breaker (the client's): the stacked script's.
    let client = part(&a, b"a", Some(b"n1"));
    let with_client: Vec<(&Part, u64)> = vec![(&client, 1), (&parts_a[0], 2)];
    assert!(a.counts(&with_client).is_none());
}

#[test]
fn each_request_of_a_counts_call_is_answered_and_written_as_its_stacked_call_exact() {
    requests_of_a_counts_call_are_answered_and_written_as_their_stacked_calls(NO);
}

#[test]
fn each_request_of_a_counts_call_is_answered_and_written_as_its_stacked_call_approx() {
    requests_of_a_counts_call_are_answered_and_written_as_their_stacked_calls(YES);
}

#[test]
fn a_counts_call_after_its_deadline_writes_nothing_for_any_request() {
    let Some((mut redis, calls)) = super::late_calls("counts_late", "counts", true) else {
        return;
    };
    let parts = net_parts(
        &calls,
        &stacked_limits(),
        &[(b"a", b"n1", NO), (b"b", b"n2", NO)],
    );
    let of: Vec<(&Part, u64)> = parts.iter().zip(1..).collect();
    let mut late = calls.counts(&of).expect("counts").evalsha;
    assert!(clock::stamp(&mut late, redis.now_ms() - 1_000));
    let frame = redis.raw(&late);
    assert!(clock::expired_ms(&frame).is_some(), "{frame:?}");
    assert_eq!(state(&mut redis, calls.prefix()), []);
}

/// Two `key=` limits of the same numbers whose values agree at run time
/// (`key=$host` and `key=$http_host`: `nginx -t` tells them apart by
/// their text) share one log.
fn two_limits_sharing_a_log(own: bool) -> Limits {
    const R: RateLimit = RateLimit {
        requests: 3,
        window_ms: 60_000,
    };
    let mut limits = Limits::default();
    if own {
        limits.add(Limit::new(OWN)).expect("own");
    }
    let name = crate::limiter::LimitName::new("h").expect("a name");
    limits
        .add(Limit::new(R).keyed(KeyId::of("$host")))
        .expect("one");
    limits
        .add(Limit::new(R).keyed(KeyId::of("$http_host")).with_name(name))
        .expect("two");
    limits
}

/// Client `c` under `limits` with these `key=` values.
fn client_c<'a>(limits: &'a Limits, values: &'a [Option<&'a [u8]>]) -> Subject<'a> {
    Subject {
        key: b"c",
        limits,
        key_values: values,
        rules: RULES,
        rising: false,
    }
}

#[test]
fn a_request_is_logged_once_in_a_log_two_of_its_limits_share() {
    let Some((mut redis, calls)) = super::late_calls("shared_log", "shared", false) else {
        return;
    };
    let limits = two_limits_sharing_a_log(false);
    let values: [Option<&[u8]>; 2] = [Some(b"example.com"), Some(b"example.com")];
    let subject = client_c(&limits, &values);
    let part = calls.whole(client_tag(b"c").as_bytes(), &subject, Offence::Unpaid);
    let allowed: Vec<i64> = (1..=3)
        .map(|seq| ints(&redis.raw(&calls.stacked(&part, seq).evalsha))[0])
        .collect();
    // 3 a minute: the third is admitted (each request counted once).
    assert_eq!(
        allowed,
        [1, 1, 1],
        "{:?}",
        state(&mut redis, calls.prefix())
    );
}

#[test]
fn an_undo_takes_back_all_a_log_two_limits_share_counted() {
    let Some((mut redis, calls)) = super::late_calls("shared_undo", "shared_undo", true) else {
        return;
    };
    let limits = two_limits_sharing_a_log(true);
    let values: [Option<&[u8]>; 3] = [None, Some(b"example.com"), Some(b"example.com")];
    let subject = client_c(&limits, &values);
    let parts = calls.parts(client_tag(b"c").as_bytes(), &subject, Offence::Unpaid);
    for part in &parts {
        redis.raw(&calls.alone(part, 5).evalsha);
    }
    for part in &parts {
        if let Some(undo) = calls.undo(part, 5) {
            redis.raw(&undo.evalsha);
        }
    }
    let after = state(&mut redis, calls.prefix());
    assert!(
        after
            .iter()
            .all(|(k, v)| !k.contains(":w:") || v == "Integer(0)"),
        "{after:?}"
    );
}

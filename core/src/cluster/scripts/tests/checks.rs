//! The checks script (`Scripts::checks`) on a real Redis: several clients
//! in one call, each answered and written as the window script answers
//! and writes its own call; a call after its deadline writes nothing.

use redis_protocol::resp2::types::OwnedFrame;

use super::redis_server::Redis;
use crate::cluster::calls::{checks_reply, Calls, CheckOf};
use crate::cluster::keys::{self, ClientKey};
use crate::limiter::breaker::{BreakerRules, StrikeRule};
use crate::limiter::{Limits, RateLimit};
use crate::redis::clock;
use crate::redis::command::client_tag;
use crate::store::{Offence, Subject, CLIENT_KEYS};

const LIMIT: RateLimit = RateLimit {
    requests: 2,
    window_ms: 60_000,
};

/// Two strikes open the breaker.
const RULES: BreakerRules = BreakerRules {
    strikes: Some(StrikeRule {
        threshold: 2,
        ttl_ms: 60_000,
    }),
    ban: None,
};

/// The clients of one call: new, at its limit (refused, struck), one
/// strike short of its block (refused, blocked by it), blocked already.
const CLIENTS: [&[u8]; 4] = [b"new", b"full", b"tripping", b"blocked"];

/// How many requests each client asks before the call compared.
const BEFORE: [u32; 4] = [0, 2, 3, 5];

fn subject(key: &[u8]) -> Subject<'_> {
    Subject {
        key,
        limits: Limits::one(LIMIT),
        limit_keys: CLIENT_KEYS,
        approx: false,
        rules: RULES,
        rising: false,
    }
}

/// The window script's call for one request of `key`.
fn one(calls: &Calls, key: &[u8], seq: u64) -> Vec<u8> {
    let tag = client_tag(key);
    let call = calls.check(tag.as_bytes(), &subject(key), Offence::Unpaid, 1, seq);
    call.evalsha
}

/// The checks script's call for one request of each of `clients`.
fn gathered(calls: &Calls, clients: &[&[u8]], seq: u64) -> Vec<u8> {
    let tags: Vec<String> = clients.iter().map(|c| client_tag(c)).collect();
    let of: Vec<CheckOf> = tags
        .iter()
        .enumerate()
        .map(|(i, tag)| CheckOf {
            tag: tag.as_bytes(),
            limit: LIMIT,
            rules: RULES,
            offence: Offence::Unpaid,
            seq: seq + i as u64,
        })
        .collect();
    calls.checks(&of).evalsha
}

fn ints(frame: &OwnedFrame) -> Vec<i64> {
    match frame {
        OwnedFrame::Array(items) => items
            .iter()
            .map(|f| match f {
                OwnedFrame::Integer(i) => *i,
                other => panic!("not an integer: {other:?}"),
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

fn int(redis: &mut Redis, prefix: &str, key: &[u8], which: ClientKey) -> i64 {
    let mut name = Vec::new();
    keys::write(
        &mut name,
        prefix.as_bytes(),
        client_tag(key).as_bytes(),
        which,
    );
    let frame = match which {
        ClientKey::Window(_) => redis.call(&[b"ZCARD", &name]),
        _ => redis.call(&[b"GET", &name]),
    };
    match frame {
        OwnedFrame::Integer(n) => n,
        OwnedFrame::BulkString(v) => std::str::from_utf8(&v).unwrap().parse().unwrap(),
        _ => 0,
    }
}

/// What Redis holds of a client: its window, refusals, strikes, unpaid
/// strikes, trips.
fn state(redis: &mut Redis, prefix: &str, key: &[u8]) -> [i64; 5] {
    [
        ClientKey::Window(LIMIT),
        ClientKey::Refused(LIMIT),
        ClientKey::Strikes,
        ClientKey::Unpaid,
        ClientKey::Trips,
    ]
    .map(|which| int(redis, prefix, key, which))
}

/// Each client's answer, with its times (reset, retry, block ms) cut to
/// whether they are set: the two calls run a few ms apart.
fn shape(reply: &[i64]) -> Vec<i64> {
    reply
        .iter()
        .enumerate()
        .map(|(i, v)| match i {
            2 | 3 | 7 => i64::from(*v > 0),
            _ => *v,
        })
        .collect()
}

fn each_client_is_answered_and_written_as_its_own_window_call_would(cluster: bool) {
    let test = format!("checks_as_window_{cluster}");
    let Some(mut redis) = Redis::connect(&test) else {
        return;
    };
    let pid = std::process::id();
    let (alone, together) = (
        format!("checks-test:{pid}:{cluster}:alone:"),
        format!("checks-test:{pid}:{cluster}:together:"),
    );
    let (a, b) = (
        Calls::new(&alone, 7, 1, cluster),
        Calls::new(&together, 7, 1, cluster),
    );
    for script in a.scripts() {
        redis.call(&[b"SCRIPT", b"LOAD", script.as_bytes()]);
    }
    let mut seq = 1;
    for (client, before) in CLIENTS.iter().zip(BEFORE) {
        for _ in 0..before {
            for calls in [&a, &b] {
                redis.raw(&one(calls, client, seq));
            }
            seq += 1;
        }
    }
    // Each on its own, then all four in one call.
    let alone_replies: Vec<Vec<i64>> = CLIENTS
        .iter()
        .map(|client| {
            seq += 1;
            ints(&redis.raw(&one(&a, client, seq)))
        })
        .collect();
    let frame = redis.raw(&gathered(&b, &CLIENTS, seq + 1));
    let OwnedFrame::BulkString(text) = &frame else {
        panic!("{frame:?}");
    };
    let together_replies = checks_reply(text, CLIENTS.len(), cluster).expect("four replies");
    for (i, client) in CLIENTS.iter().enumerate() {
        let (x, y) = (&alone_replies[i], &together_replies[i]);
        assert_eq!(x.len(), y.len(), "{i}");
        // (A Redis Cluster's generation: made by the first refusal of each
        // prefix, so it differs; set exactly where a refusal was.)
        let n = 10;
        assert_eq!(shape(&x[..n]), shape(&y[..n]), "client {i}: {x:?} {y:?}");
        if cluster {
            assert_eq!(x[n] > 0, y[n] > 0, "client {i}'s generation: {x:?} {y:?}");
        }
        assert_eq!(
            state(&mut redis, &alone, client),
            state(&mut redis, &together, client),
            "client {i}"
        );
    }
    // What each was: admitted, refused, refused and blocked by it, blocked.
    let admitted: Vec<i64> = together_replies.iter().map(|r| r[0]).collect();
    let blocks: Vec<i64> = together_replies.iter().map(|r| r[6]).collect();
    let tripped: Vec<i64> = together_replies.iter().map(|r| r[8]).collect();
    assert_eq!(admitted, [1, 0, 0, 0]);
    assert_eq!(tripped, [0, 0, 1, 0]);
    assert_eq!(blocks, [0, 0, 0, 1]);
}

#[test]
fn each_client_of_a_checks_call_is_answered_and_written_as_its_own_window_call_would() {
    each_client_is_answered_and_written_as_its_own_window_call_would(false);
}

#[test]
fn a_redis_clusters_checks_call_answers_its_slots_generation_after_each_refusal() {
    each_client_is_answered_and_written_as_its_own_window_call_would(true);
}

#[test]
fn a_checks_call_after_its_deadline_writes_nothing_for_any_client() {
    let Some(mut redis) = Redis::connect("checks_late") else {
        return;
    };
    let prefix = format!("checks-test:{}:late:", std::process::id());
    let calls = Calls::new(&prefix, 7, 1, false);
    for script in calls.scripts() {
        redis.call(&[b"SCRIPT", b"LOAD", script.as_bytes()]);
    }
    let mut late = gathered(&calls, &CLIENTS[..2], 1);
    let past = redis.now_ms() - 1_000;
    assert!(clock::stamp(&mut late, past));
    let frame = redis.raw(&late);
    assert!(clock::expired_ms(&frame).is_some(), "{frame:?}");
    for client in &CLIENTS[..2] {
        assert_eq!(state(&mut redis, &prefix, client), [0; 5]);
    }
    // On time: both counted.
    let mut on_time = gathered(&calls, &CLIENTS[..2], 3);
    assert!(clock::stamp(&mut on_time, redis.now_ms() + 60_000));
    assert!(matches!(redis.raw(&on_time), OwnedFrame::BulkString(_)));
    for client in &CLIENTS[..2] {
        assert_eq!(state(&mut redis, &prefix, client)[0], 1);
    }
}

//! The checks script (`Scripts::checks`) on a real Redis: several clients
//! in one call, each answered and written as the window script answers
//! and writes its own call; a call after its deadline writes nothing.

use redis_protocol::resp2::types::OwnedFrame;

use super::redis_server::Redis;
use super::{ints, shape};
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
pub(super) const RULES: BreakerRules = BreakerRules {
    strikes: Some(StrikeRule {
        threshold: 2,
        ttl_ms: 60_000,
    }),
    ban: None,
};

/// Another location's: one request a second, no breaker, a refusal no
/// offence (a paid request's check).
const OTHER: (RateLimit, BreakerRules, Offence) = (
    RateLimit {
        requests: 1,
        window_ms: 1_000,
    },
    BreakerRules {
        strikes: None,
        ban: None,
    },
    Offence::None,
);

const UNPAID: (RateLimit, BreakerRules, Offence) = (LIMIT, RULES, Offence::Unpaid);

/// The clients of one call: new, another location's new one and one of
/// its at its limit, at its limit (refused, struck), one strike short of
/// its block (refused, blocked by it), blocked already; in three sets of
/// shared arguments (those in a row under the same location).
const CLIENTS: [&[u8]; 6] = [
    b"new",
    b"other",
    b"other full",
    b"full",
    b"tripping",
    b"blocked",
];

/// Each client's location.
const WHERE: [(RateLimit, BreakerRules, Offence); 6] =
    [UNPAID, OTHER, OTHER, UNPAID, UNPAID, UNPAID];

/// How many requests each client asks before the call compared.
const BEFORE: [u32; 6] = [0, 0, 1, 2, 3, 5];

fn subject<'a>(
    key: &'a [u8],
    limits: &'a Limits,
    (_, rules, _): (RateLimit, BreakerRules, Offence),
) -> Subject<'a> {
    Subject {
        key,
        limits,
        key_values: CLIENT_KEYS,
        rules,
        rising: false,
    }
}

/// The window script's call for one request of client `i`.
fn one(calls: &Calls, i: usize, seq: u64) -> Vec<u8> {
    let (key, at) = (CLIENTS[i], WHERE[i]);
    let tag = client_tag(key);
    let limits = Limits::one(at.0);
    let call = calls.check(tag.as_bytes(), &subject(key, &limits, at), at.2, 1, seq);
    call.evalsha
}

/// The checks script's call for one request of each of clients `clients`.
fn gathered(calls: &Calls, clients: &[usize], seq: u64) -> Vec<u8> {
    let tags: Vec<String> = clients.iter().map(|&i| client_tag(CLIENTS[i])).collect();
    let of: Vec<CheckOf> = tags
        .iter()
        .zip(clients)
        .map(|(tag, &i)| CheckOf {
            tag: tag.as_bytes(),
            limit: WHERE[i].0,
            rules: WHERE[i].1,
            offence: WHERE[i].2,
        })
        .collect();
    // (The first client's number, as each client had one.)
    let first = clients.first().map_or(0, |&i| i as u64);
    calls.checks(&of, seq + first).evalsha
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
fn state(redis: &mut Redis, prefix: &str, i: usize) -> [i64; 5] {
    let (key, limit) = (CLIENTS[i], WHERE[i].0);
    [
        ClientKey::Window(limit),
        ClientKey::Refused(limit),
        ClientKey::Strikes,
        ClientKey::Unpaid,
        ClientKey::Trips,
    ]
    .map(|which| int(redis, prefix, key, which))
}

fn each_client_is_answered_and_written_as_its_own_window_call_would(cluster: bool) {
    let test = format!("checks_as_window_{cluster}");
    let Some((mut redis, a, b)) = super::alone_and_together(&test, "checks", cluster) else {
        return;
    };
    let (alone, together) = (a.prefix().to_owned(), b.prefix().to_owned());
    let mut seq = 1;
    for (i, before) in BEFORE.into_iter().enumerate() {
        for _ in 0..before {
            for calls in [&a, &b] {
                redis.raw(&one(calls, i, seq));
            }
            seq += 1;
        }
    }
    // Each on its own, then all in one call.
    let alone_replies: Vec<Vec<i64>> = (0..CLIENTS.len())
        .map(|i| {
            seq += 1;
            ints(&redis.raw(&one(&a, i, seq)))
        })
        .collect();
    let all: Vec<usize> = (0..CLIENTS.len()).collect();
    let frame = redis.raw(&gathered(&b, &all, seq + 1));
    let OwnedFrame::BulkString(text) = &frame else {
        panic!("{frame:?}");
    };
    let limits = WHERE.map(|(limit, _, _)| limit);
    let together_replies = checks_reply(text, &limits, cluster).expect("a reply each");
    // The new clients' replies are the shortest ('n').
    assert!(
        text.starts_with(b"n n "),
        "{}",
        String::from_utf8_lossy(text)
    );
    for i in 0..CLIENTS.len() {
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
            state(&mut redis, &alone, i),
            state(&mut redis, &together, i),
            "client {i}"
        );
    }
    // What each was: admitted, admitted, refused (no strike), refused,
    // refused and blocked by it, blocked.
    let admitted: Vec<i64> = together_replies.iter().map(|r| r[0]).collect();
    let struck: Vec<i64> = together_replies.iter().map(|r| r[9]).collect();
    let blocks: Vec<i64> = together_replies.iter().map(|r| r[6]).collect();
    let tripped: Vec<i64> = together_replies.iter().map(|r| r[8]).collect();
    assert_eq!(admitted, [1, 1, 0, 0, 0, 0]);
    assert_eq!(struck, [0, 0, 0, 1, 1, 0]);
    assert_eq!(tripped, [0, 0, 0, 0, 1, 0]);
    assert_eq!(blocks, [0, 0, 0, 0, 0, 1]);
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
    let Some((mut redis, calls)) = super::late_calls("checks_late", "checks", false) else {
        return;
    };
    let mut late = gathered(&calls, &[0, 1], 1);
    let past = redis.now_ms() - 1_000;
    assert!(clock::stamp(&mut late, past));
    let frame = redis.raw(&late);
    assert!(clock::expired_ms(&frame).is_some(), "{frame:?}");
    for i in 0..2 {
        assert_eq!(state(&mut redis, calls.prefix(), i), [0; 5]);
    }
    // On time: both counted.
    let mut on_time = gathered(&calls, &[0, 1], 3);
    assert!(clock::stamp(&mut on_time, redis.now_ms() + 60_000));
    assert!(matches!(redis.raw(&on_time), OwnedFrame::BulkString(_)));
    for i in 0..2 {
        assert_eq!(state(&mut redis, calls.prefix(), i)[0], 1);
    }
}

/// The words of a call as Redis reads them (a RESP array).
fn words(command: &[u8]) -> Vec<String> {
    let decoded = redis_protocol::resp2::decode::decode(command);
    let Ok(Some((OwnedFrame::Array(words), _))) = decoded else {
        panic!("not a command: {decoded:?}");
    };
    words
        .iter()
        .map(|w| match w {
            OwnedFrame::BulkString(w) => String::from_utf8_lossy(w).into_owned(),
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn one_redis_names_each_gathered_client_by_its_log_alone_a_cluster_by_its_five_keys() {
    for cluster in [false, true] {
        let calls = Calls::new("pow:", 7, 1, cluster);
        let clients = [0, 1, 3];
        let w = words(&gathered(&calls, &clients, 1));
        // EVALSHA sha numkeys: one key a client (a Redis Cluster's five),
        // a Redis Cluster's slot generation key last.
        let per = if cluster { 5 } else { 1 };
        let n = per * clients.len() + usize::from(cluster);
        assert_eq!(w[2], n.to_string(), "{w:?}");
        for (at, &i) in clients.iter().enumerate() {
            let tag = client_tag(CLIENTS[i]);
            let limit = WHERE[i].0;
            let all = [
                ClientKey::Window(limit),
                ClientKey::Refused(limit),
                ClientKey::Strikes,
                ClientKey::Trips,
                ClientKey::Unpaid,
            ];
            for (k, &which) in all[..per].iter().enumerate() {
                let mut name = Vec::new();
                keys::write(&mut name, b"pow:", tag.as_bytes(), which);
                assert_eq!(w[3 + per * at + k].as_bytes(), name, "client {i} {which:?}");
            }
        }
    }
}

#[test]
fn a_checks_call_writes_a_banned_clients_keys_under_the_names_the_node_reads() {
    let Some((mut redis, calls)) = super::late_calls("checks_names", "checks", false) else {
        return;
    };
    // Two requests a minute, the first strike opens the breaker and bans:
    // the second call's two checks (the third and fourth requests) write
    // the refusals, a strike, an unpaid strike and the trips (the client's
    // every key a check writes).
    let (limit, tag) = (LIMIT, client_tag(b"banned"));
    let rules = BreakerRules {
        strikes: Some(StrikeRule {
            threshold: 1,
            ttl_ms: 60_000,
        }),
        ban: Some(crate::limiter::breaker::BanRule {
            after: 1,
            ttl_ms: 60_000,
        }),
    };
    for seq in 0..3 {
        let of = CheckOf {
            tag: tag.as_bytes(),
            limit,
            rules,
            offence: Offence::Unpaid,
        };
        redis.raw(&calls.checks(&[of, of], seq).evalsha);
    }
    let name = |which| {
        let mut name = Vec::new();
        keys::write(&mut name, calls.prefix().as_bytes(), tag.as_bytes(), which);
        String::from_utf8(name).unwrap()
    };
    let mut want: Vec<String> = [
        ClientKey::Window(limit),
        ClientKey::Refused(limit),
        ClientKey::Strikes,
        ClientKey::Unpaid,
        ClientKey::Trips,
    ]
    .map(name)
    .to_vec();
    let pattern = format!("{}*", name(ClientKey::Strikes).trim_end_matches(":s"));
    let OwnedFrame::Array(found) = redis.call(&[b"KEYS", pattern.as_bytes()]) else {
        panic!("KEYS");
    };
    let mut found: Vec<String> = found
        .iter()
        .map(|f| match f {
            OwnedFrame::BulkString(v) => String::from_utf8_lossy(v).into_owned(),
            other => panic!("{other:?}"),
        })
        .collect();
    want.sort();
    found.sort();
    assert_eq!(found, want);
}

#[test]
fn a_checks_call_sends_one_member_its_first_checks() {
    let calls = Calls::new("pow:", 7, 1, false);
    let w = words(&gathered(&calls, &[0, 1, 3], 40));
    // EVALSHA sha 3 keys; then 3 sets of eight (1 + 24), the member, the
    // deadline.
    let argv = &w[6..];
    assert_eq!(argv.len(), 1 + 3 * 8 + 1 + 1, "{w:?}");
    let mut member = Vec::new();
    crate::cluster::scripts::args::write_member(&mut member, 7, 1, 40);
    assert_eq!(argv[25].as_bytes(), member);
}

#[test]
fn a_client_named_thrice_in_one_checks_call_is_counted_as_three_calls_count_it() {
    for cluster in [false, true] {
        let test = format!("checks_thrice_{cluster}");
        let Some((mut redis, a, b)) = super::alone_and_together(&test, "checks_thrice", cluster)
        else {
            return;
        };
        // "new" (two requests a minute, two strikes block): admitted,
        // admitted, refused and struck.
        let alone: Vec<Vec<i64>> = (0..3)
            .map(|seq| ints(&redis.raw(&one(&a, 0, seq))))
            .collect();
        let frame = redis.raw(&gathered(&b, &[0, 0, 0], 10));
        let OwnedFrame::BulkString(text) = &frame else {
            panic!("{frame:?}");
        };
        let together = checks_reply(text, &[LIMIT; 3], cluster).expect("a reply each");
        for (x, y) in alone.iter().zip(&together) {
            assert_eq!(shape(&x[..10]), shape(&y[..10]), "{x:?} {y:?}");
        }
        assert_eq!(together.iter().map(|r| r[0]).collect::<Vec<_>>(), [1, 1, 0]);
        assert_eq!(
            state(&mut redis, a.prefix(), 0),
            state(&mut redis, b.prefix(), 0)
        );
        assert_eq!(
            state(&mut redis, b.prefix(), 0)[0],
            2,
            "two admissions logged"
        );
    }
}

#[test]
fn a_client_whose_key_has_braces_keeps_every_key_in_its_slot() {
    let Some((mut redis, calls)) = super::late_calls("braces_one_slot", "braces", true) else {
        return;
    };
    let prefix = calls.prefix().to_owned();
    for key in [&b"{a}b}"[..], b"}{", b"x{}y", b"{", b"\x00{203.0.113.7}"] {
        let tag = client_tag(key);
        let limits = Limits::one(LIMIT);
        let subject = subject(key, &limits, UNPAID);
        // Admitted twice, then refused and struck, then blocked: its
        // window, refusals, strikes and unpaid strikes written, and its
        // slot's generation (`<prefix>gen:{<n>}`).
        for seq in 1..=5 {
            redis.raw(
                &calls
                    .check(tag.as_bytes(), &subject, Offence::Unpaid, 1, seq)
                    .evalsha,
            );
        }
        let pattern = format!("{prefix}*");
        let OwnedFrame::Array(names) = redis.call(&[b"KEYS", pattern.as_bytes()]) else {
            panic!("KEYS {pattern}");
        };
        let slot = crate::cluster::generation::slot_of_tag(tag.as_bytes());
        let mut written = 0;
        assert_eq!(names.len(), 5, "{key:?}");
        for name in names {
            let OwnedFrame::BulkString(name) = name else {
                panic!("{name:?}");
            };
            let shown = String::from_utf8_lossy(&name).into_owned();
            assert_eq!(crate::redis::cluster::key_slot(&name), slot, "{shown}");
            written += usize::from(shown.contains(&format!("{{{tag}}}:")));
            redis.call(&[b"DEL", &name]);
        }
        assert_eq!(written, 4, "{key:?}: window, refusals, strikes, unpaid");
    }
}

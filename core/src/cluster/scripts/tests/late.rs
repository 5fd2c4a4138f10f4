//! Calls Redis runs after their deadline (SPEC §6: "A call that Redis runs
//! after the node gave up on it changes nothing"), on a real Redis, as the
//! node builds and stamps them (`Calls`, `redis::clock`): every script
//! that writes answers "expired" and writes nothing; and the stall of
//! issue 37 replayed: the checks a stopped Redis runs once it resumes
//! strike no one, where without deadlines they blocked a paying client.

use std::time::{Duration, Instant};

use redis_protocol::resp2::types::OwnedFrame;

use super::redis_server::Redis;
use crate::cluster::calls::{BatchOf, Call, Calls};
use crate::cluster::fallback::{decider, Answer, Decider, Unanswered, Unavailable};
use crate::cluster::keys::{self, ClientKey};
use crate::cluster::refusals::Sending;
use crate::cluster::scripts::Scripts;
use crate::limiter::breaker::{BreakerRules, StrikeRule};
use crate::limiter::{Limits, RateLimit};
use crate::redis::clock::{self, RedisClock};
use crate::redis::command::client_tag;
use crate::store::{Offence, Op, Solution, Subject, CLIENT_KEYS};

/// `pow_shield_redis ... timeout=300ms`, as in t/pow_shield_cluster_stall.t.
const TIMEOUT_MS: u64 = 300;

const LIMIT: RateLimit = RateLimit {
    requests: 2,
    window_ms: 3_600_000,
};

/// `pow_shield_strikes 5 60s` (the default).
const RULES: BreakerRules = BreakerRules {
    strikes: Some(StrikeRule {
        threshold: 5,
        ttl_ms: 60_000,
    }),
    ban: None,
};

fn subject(key: &[u8], limits: Limits, approx: bool) -> Subject<'_> {
    let mut counting = Limits::NONE;
    for limit in limits.as_slice() {
        let limit = if approx { limit.approx() } else { *limit };
        counting.add(limit).unwrap();
    }
    Subject {
        key,
        limits: Box::leak(Box::new(counting)),
        key_values: CLIENT_KEYS,
        rules: RULES,
        rising: false,
    }
}

fn solution(n: u8, generation: Option<u64>) -> Solution {
    Solution {
        digest: [n; 32],
        spent_until_ms: 60_000,
        generation,
        forgive: true,
        retry_at_ms: None,
    }
}

/// One worker's calls and its connection's clock.
struct Node {
    calls: Calls,
    clock: RedisClock,
    seq: u64,
}

impl Node {
    fn new(prefix: &str, cluster: bool, redis: &mut Redis) -> Node {
        for script in Scripts::for_mode(cluster).iter() {
            redis.call(&[b"SCRIPT", b"LOAD", script.text.as_bytes()]);
        }
        Node {
            calls: Calls::new(prefix, 7, 1, cluster),
            clock: RedisClock::default(),
            seq: 0,
        }
    }

    /// The connection's handshake at `local_ms` (nginx's clock): `TIME`.
    fn connect(&mut self, redis: &mut Redis, local_ms: u64) {
        self.clock.learn(redis.now_ms(), local_ms);
    }

    /// `call` as its connection queues it at `local_ms`: stamped with its
    /// deadline in Redis's clock.
    fn stamped(&self, call: &Call, local_ms: u64) -> Vec<u8> {
        let mut cmd = call.evalsha.clone();
        let deadline = self.clock.deadline(local_ms + TIMEOUT_MS).expect("learnt");
        assert!(clock::stamp(&mut cmd, deadline));
        cmd
    }

    fn check(&mut self, key: &[u8], k: u32) -> Call {
        self.seq += 1;
        let s = subject(key, Limits::one(LIMIT), false);
        let tag = client_tag(key);
        self.calls
            .check(tag.as_bytes(), &s, Offence::Unpaid, k, self.seq)
    }

    /// Every call that writes, for client `key`.
    fn every_call(&mut self, key: &[u8]) -> Vec<(&'static str, Call)> {
        let tag = client_tag(key);
        let tag = tag.as_bytes();
        let mut two = Limits::one(LIMIT);
        two.push(
            RateLimit {
                requests: 1,
                window_ms: 1_000,
            },
            None,
        )
        .unwrap();
        let (stacked, approx) = (
            subject(key, two, false),
            subject(key, Limits::one(LIMIT), true),
        );
        let spent = self.calls.spent_key(&[9; 32], key);
        let batch = BatchOf {
            tag,
            limit: LIMIT,
            rules: RULES,
            sending: Sending {
                run: 1,
                total: 3,
                base: 0,
            },
        };
        vec![
            ("window", self.check(key, 1)),
            ("coalesced", self.check(key, 3)),
            (
                "approx",
                self.calls.check(tag, &approx, Offence::Unpaid, 1, 1),
            ),
            (
                "stacked",
                self.calls.check(tag, &stacked, Offence::Unpaid, 1, 2),
            ),
            ("strike", self.calls.strike(tag, RULES)),
            (
                "spend",
                self.calls
                    .spend(&spent, tag, &solution(9, None), RULES, None, 0),
            ),
            (
                "gen_spend",
                self.calls
                    .spend(&spent, tag, &solution(9, Some(1)), RULES, Some(1), 0),
            ),
            ("replay", self.calls.replay(&spent, tag, 60_000)),
            ("batch", self.calls.batch(&[batch])),
        ]
    }
}

fn get(redis: &mut Redis, key: &str) -> i64 {
    match redis.call(&[b"GET", key.as_bytes()]) {
        OwnedFrame::BulkString(v) => std::str::from_utf8(&v).unwrap().parse().unwrap(),
        _ => 0,
    }
}

fn key_of(prefix: &str, client: &[u8], which: ClientKey) -> String {
    let mut w = Vec::new();
    keys::write(
        &mut w,
        prefix.as_bytes(),
        client_tag(client).as_bytes(),
        which,
    );
    String::from_utf8(w).unwrap()
}

/// Every key under `prefix`, with its value (`DUMP`), in order.
fn snapshot(redis: &mut Redis, prefix: &str) -> Vec<(Vec<u8>, OwnedFrame)> {
    let pattern = format!("{prefix}*");
    let OwnedFrame::Array(names) = redis.call(&[b"KEYS", pattern.as_bytes()]) else {
        panic!("KEYS");
    };
    let mut names: Vec<Vec<u8>> = names
        .into_iter()
        .map(|n| match n {
            OwnedFrame::BulkString(n) => n,
            other => panic!("{other:?}"),
        })
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let dump = redis.call(&[b"DUMP", &n]);
            (n, dump)
        })
        .collect()
}

fn clear(redis: &mut Redis, prefix: &str) {
    for (name, _) in snapshot(redis, prefix) {
        redis.call(&[b"DEL", &name]);
    }
}

#[test]
fn a_call_that_comes_after_its_deadline_writes_nothing_and_answers_redis_clock() {
    let Some(mut redis) = Redis::connect("late_calls") else {
        return;
    };
    for cluster in [false, true] {
        let prefix = format!("t:late:{}:", u8::from(cluster));
        clear(&mut redis, &prefix);
        let mut node = Node::new(&prefix, cluster, &mut redis);
        node.connect(&mut redis, 10_000);
        // A client with strikes and a log: 2 admitted, 3 refused.
        for _ in 0..5 {
            let call = node.check(b"c", 1);
            let cmd = node.stamped(&call, 10_000);
            assert!(matches!(
                Answer::of(Some(&redis.raw(&cmd).into())),
                Answer::Ran(_)
            ));
        }
        assert_eq!(
            get(&mut redis, &key_of(&prefix, b"c", ClientKey::Strikes)),
            3
        );
        let before = snapshot(&mut redis, &prefix);
        let asked_at = redis.now_ms();
        for (what, call) in node.every_call(b"c") {
            // Queued at local 8 000: due back by 8 300, 1.7 s ago.
            let reply = redis.raw(&node.stamped(&call, 8_000));
            assert_eq!(
                Answer::of(Some(&reply.clone().into())),
                Answer::Expired,
                "{what} (cluster {cluster})"
            );
            let ms = clock::expired_ms(&reply).unwrap();
            assert!(ms >= asked_at, "{what}: Redis's clock when it ran");
            // And as EVAL (Redis lost the script): the same.
            let mut eval = call.eval();
            clock::stamp(&mut eval, node.clock.deadline(8_300).unwrap());
            assert_eq!(
                Answer::of(Some(&redis.raw(&eval).into())),
                Answer::Expired,
                "{what}"
            );
        }
        assert_eq!(
            snapshot(&mut redis, &prefix),
            before,
            "nothing written (cluster {cluster})"
        );
        // In time, each runs.
        for (what, call) in node.every_call(b"c") {
            let reply = redis.raw(&node.stamped(&call, 10_000));
            assert_ne!(
                Answer::of(Some(&reply.clone().into())),
                Answer::Expired,
                "{what}"
            );
            assert!(!matches!(reply, OwnedFrame::Error(_)), "{what}: {reply:?}");
        }
        assert_ne!(snapshot(&mut redis, &prefix), before);
    }
}

/// Issue 37: two nodes' workers, `timeout=300ms`, a client paying every
/// challenge with 4 requests in flight; Redis stopped for longer than the
/// timeout. The node gave up on the checks in flight (the fallback decided
/// them); Redis, once resumed, runs them.
#[test]
fn the_checks_a_stopped_redis_runs_once_resumed_strike_no_one() {
    let Some(mut redis) = Redis::connect("late_stall") else {
        return;
    };
    let prefix = "t:late:stall:";
    clear(&mut redis, prefix);
    let mut node = Node::new(prefix, false, &mut redis);
    let strikes =
        |redis: &mut Redis, client: &[u8]| get(redis, &key_of(prefix, client, ClientKey::Strikes));

    // nginx's clock: the ms since the test began.
    let started = Instant::now();
    let local = || started.elapsed().as_millis() as u64;

    // Before the stall (the connection's handshake at local 0): the payer's
    // two admitted requests, then three 429s, each a strike it has not
    // paid yet (its solutions are on their way).
    node.connect(&mut redis, local());
    for client in [&b"payer"[..], b"unstamped"] {
        for _ in 0..5 {
            let call = node.check(client, 1);
            let cmd = node.stamped(&call, local());
            assert!(matches!(
                Answer::of(Some(&redis.raw(&cmd).into())),
                Answer::Ran(_)
            ));
        }
        assert_eq!(strikes(&mut redis, client), 3);
    }

    // Redis stops. Four more unpaid requests go out (4 in flight); the
    // node gives up on them 300 ms later, and the fallback decides each as
    // a call Redis may have run (its challenge pays a strike back).
    let in_flight: Vec<Call> = (0..4).map(|_| node.check(b"payer", 1)).collect();
    let sent_at = local();
    let stamped: Vec<Vec<u8>> = in_flight.iter().map(|c| node.stamped(c, sent_at)).collect();
    let unpaid = Op::Check {
        offence: Offence::Unpaid,
    };
    let gave_up = |answer: Answer| {
        decider(Unanswered {
            op: unpaid,
            failure: Unavailable::Down,
            sent: answer.may_have_run(),
            fail_local: true,
            zone: true,
            redis_only: false,
            owed: false,
        })
    };
    assert_eq!(
        gave_up(Answer::Lost),
        Decider::Zone {
            maybe_struck: true,
            replay: false
        }
    );
    // The stall lasts longer than the timeout (at least 0.4 s here; no
    // upper bound is assumed).
    std::thread::sleep(Duration::from_millis(TIMEOUT_MS + 100));

    // Redis resumes and runs what it had not read: every call expired.
    for cmd in &stamped {
        let answer = Answer::of(Some(&redis.raw(cmd).into()));
        assert_eq!(answer, Answer::Expired);
        // (A reply that still finds its request is decided as the
        // timeout was, striking nothing.)
        assert_eq!(
            gave_up(answer),
            Decider::Zone {
                maybe_struck: false,
                replay: false
            }
        );
    }
    assert_eq!(
        strikes(&mut redis, b"payer"),
        3,
        "no strike from the backlog"
    );
    let log = key_of(prefix, b"payer", ClientKey::Window(LIMIT));
    assert_eq!(
        redis.call(&[b"ZCARD", log.as_bytes()]),
        OwnedFrame::Integer(2)
    );

    // Without deadlines (before issue 37), the same backlog struck the
    // client past its threshold: blocked for the strike time although it
    // paid every challenge.
    for _ in 0..4 {
        let call = node.check(b"unstamped", 1);
        redis.raw(&call.evalsha);
    }
    assert_eq!(
        strikes(&mut redis, b"unstamped"),
        5,
        "blocked by the backlog"
    );

    // Back (a new connection: TIME again): the payer's solutions are
    // spent in time, each taking its 429's strike back.
    node.connect(&mut redis, local());
    let tag = client_tag(b"payer");
    for n in 0..3 {
        let spent = node.calls.spent_key(&[n; 32], b"payer");
        let call = node
            .calls
            .spend(&spent, tag.as_bytes(), &solution(n, None), RULES, None, 0);
        let reply = redis.raw(&node.stamped(&call, local()));
        assert_eq!(
            Answer::of(Some(&reply.clone().into())),
            Answer::ran(&[1, 2 - i64::from(n), 0, 0]),
            "{reply:?}"
        );
    }
    assert_eq!(strikes(&mut redis, b"payer"), 0);
}

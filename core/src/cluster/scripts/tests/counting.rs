//! Each limit of a location counted its own way (`approx` or exact, per
//! `pow_shield_limit` line), on a real Redis, with the calls the node
//! builds (`Calls`): the stacked script keeps a counter (a hash) for an
//! `approx` limit and a log (a sorted set) for an exact one in one call,
//! and a Redis Cluster's take-back (`undo`) takes each count back as what
//! it is.

use redis_protocol::resp2::types::OwnedFrame;

use super::ints;
use super::redis_server::Redis;
use crate::cluster::calls::{Call, Calls};
use crate::cluster::fallback::Answer;
use crate::cluster::keys::{self, ClientKey};
use crate::cluster::scripts::Scripts;
use crate::limiter::breaker::{BreakerRules, StrikeRule};
use crate::limiter::{KeyId, Limit, Limits, RateLimit};
use crate::redis::clock::{self, RedisClock};
use crate::redis::command::client_tag;
use crate::store::{Offence, Subject};

/// 2 an hour, `approx`.
const TWO_AN_HOUR: RateLimit = RateLimit {
    requests: 2,
    window_ms: 3_600_000,
};

/// 3 a minute, exact.
const THREE_A_MINUTE: RateLimit = RateLimit {
    requests: 3,
    window_ms: 60_000,
};

const RULES: BreakerRules = BreakerRules {
    strikes: Some(StrikeRule {
        threshold: 5,
        ttl_ms: 60_000,
    }),
    ban: None,
};

/// A worker's calls, stamped as its connection stamps them.
struct Node {
    calls: Calls,
    clock: RedisClock,
}

impl Node {
    fn new(prefix: &str, cluster: bool, redis: &mut Redis) -> Node {
        for script in Scripts::for_mode(cluster).iter() {
            redis.call(&[b"SCRIPT", b"LOAD", script.text.as_bytes()]);
        }
        let mut clock = RedisClock::default();
        clock.learn(redis.now_ms(), 10_000);
        Node {
            calls: Calls::new(prefix, 7, 1, cluster),
            clock,
        }
    }

    /// `call`'s reply, run in time.
    fn reply(&self, redis: &mut Redis, call: &Call) -> OwnedFrame {
        let mut cmd = call.evalsha.clone();
        assert!(clock::stamp(&mut cmd, self.clock.deadline(10_300).unwrap()));
        redis.raw(&cmd)
    }

    /// `call`'s integers, run in time.
    fn run(&self, redis: &mut Redis, call: &Call) -> Vec<i64> {
        let reply = self.reply(redis, call);
        assert!(
            matches!(Answer::of(Some(&reply.clone().into())), Answer::Ran(_)),
            "{reply:?}"
        );
        ints(&reply)
    }
}

fn key_of(prefix: &str, tag: &str, which: ClientKey) -> String {
    let mut w = Vec::new();
    keys::write(&mut w, prefix.as_bytes(), tag.as_bytes(), which);
    String::from_utf8(w).unwrap()
}

fn type_of(redis: &mut Redis, key: &str) -> String {
    match redis.call(&[b"TYPE", key.as_bytes()]) {
        OwnedFrame::SimpleString(t) | OwnedFrame::BulkString(t) => {
            String::from_utf8(t.to_vec()).unwrap()
        }
        other => panic!("TYPE: {other:?}"),
    }
}

fn clear(redis: &mut Redis, prefix: &str) {
    let pattern = format!("{prefix}*");
    if let OwnedFrame::Array(names) = redis.call(&[b"KEYS", pattern.as_bytes()]) {
        for name in names {
            if let OwnedFrame::BulkString(name) = name {
                redis.call(&[b"DEL", &name]);
            }
        }
    }
}

/// 40 an hour per network, exact.
const FORTY_AN_HOUR: RateLimit = RateLimit {
    requests: 40,
    window_ms: 3_600_000,
};

/// `pow_shield_limit 2 1h approx; pow_shield_limit 3 1m;`, and with `net`
/// `pow_shield_limit 40 1h key=$pow_shield_net;` (in another slot).
fn mixed(net: Option<&'static [u8]>) -> Subject<'static> {
    let mut limits = Limits::NONE;
    limits.add(Limit::new(TWO_AN_HOUR).approx()).unwrap();
    limits.add(Limit::new(THREE_A_MINUTE)).unwrap();
    let values: &'static [Option<&'static [u8]>] = match net {
        Some(net) => {
            let per_net = Limit::new(FORTY_AN_HOUR).keyed(KeyId::of("$pow_shield_net"));
            limits.add(per_net).unwrap();
            Box::leak(Box::new([None, None, Some(net)]))
        }
        None => &[],
    };
    Subject {
        key: b"c",
        limits: Box::leak(Box::new(limits)),
        key_values: values,
        rules: RULES,
        rising: false,
    }
}

#[test]
fn an_approx_limit_and_an_exact_one_in_one_call_each_count_their_own_way() {
    let Some(mut redis) = Redis::connect("mixed_counting") else {
        return;
    };
    for cluster in [false, true] {
        let prefix = format!("t:mixed:{}:", u8::from(cluster));
        clear(&mut redis, &prefix);
        let node = Node::new(&prefix, cluster, &mut redis);
        let subject = mixed(None);
        let tag = client_tag(b"c");
        let allowed: Vec<i64> = (1..=3)
            .map(|seq| {
                let call = node
                    .calls
                    .check(tag.as_bytes(), &subject, Offence::Unpaid, 1, seq);
                let reply = node.run(&mut redis, &call);
                reply[0]
            })
            .collect();
        assert_eq!(
            allowed,
            [1, 1, 0],
            "the approx limit of 2 refuses the third"
        );
        let counter = key_of(&prefix, &tag, ClientKey::Approx(TWO_AN_HOUR));
        let log = key_of(&prefix, &tag, ClientKey::Window(THREE_A_MINUTE));
        assert_eq!(type_of(&mut redis, &counter), "hash", "cluster {cluster}");
        assert_eq!(type_of(&mut redis, &log), "zset", "cluster {cluster}");
        let exact_as_approx = key_of(&prefix, &tag, ClientKey::Approx(THREE_A_MINUTE));
        assert_eq!(type_of(&mut redis, &exact_as_approx), "none");
        clear(&mut redis, &prefix);
    }
}

#[test]
fn a_redis_cluster_takes_each_count_back_as_what_it_is() {
    let Some(mut redis) = Redis::connect("mixed_undo") else {
        return;
    };
    let prefix = "t:mixed_undo:";
    clear(&mut redis, prefix);
    let node = Node::new(prefix, true, &mut redis);
    let net = b"198.51.100.0/24";
    let subject = mixed(Some(net));
    let tag = client_tag(b"c");
    let seq = 41;
    let parts = node
        .calls
        .stacked_parts(tag.as_bytes(), &subject, Offence::Unpaid, seq);
    assert_eq!(parts.len(), 2, "the client's slot and the network's");
    for (_, call) in &parts {
        assert_eq!(node.run(&mut redis, call)[0], 1, "admitted and counted");
    }
    let counter = key_of(prefix, &tag, ClientKey::Approx(TWO_AN_HOUR));
    let own = keys::own_tag(net);
    let logs = [
        key_of(prefix, &tag, ClientKey::Window(THREE_A_MINUTE)),
        key_of(prefix, &own, ClientKey::Window(FORTY_AN_HOUR)),
    ];
    let count = |redis: &mut Redis| match redis.call(&[b"HGET", counter.as_bytes(), b"c"]) {
        OwnedFrame::BulkString(c) => std::str::from_utf8(&c).unwrap().parse::<i64>().unwrap(),
        _ => 0,
    };
    let members = |redis: &mut Redis| {
        logs.clone()
            .map(|log| match redis.call(&[b"ZCARD", log.as_bytes()]) {
                OwnedFrame::Integer(n) => n,
                other => panic!("ZCARD: {other:?}"),
            })
    };
    assert_eq!((count(&mut redis), members(&mut redis)), (1, [1, 1]));
    // Another slot refused it: each part's counts are taken back, the
    // client's counter and log in one call.
    let taken: Vec<OwnedFrame> = parts
        .iter()
        .map(|(part, _)| {
            let undo = node.calls.undo(part, seq).expect("a Redis Cluster's");
            node.reply(&mut redis, &undo)
        })
        .collect();
    assert_eq!(taken, [OwnedFrame::Integer(2), OwnedFrame::Integer(1)]);
    assert_eq!((count(&mut redis), members(&mut redis)), (0, [0, 0]));
    clear(&mut redis, prefix);
}

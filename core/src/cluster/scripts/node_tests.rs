//! A Redis Cluster master's call of several slots' stacked checks
//! (`PartScripts::node`) on a real Redis: each slot answers as its own
//! gathered call of the stacked script would, and a late call writes
//! nothing. (A slot the master does not serve: `t/`'s Redis Cluster.)

use redis_protocol::resp2::types::OwnedFrame;

use super::tests::redis_server::Redis;
use crate::cluster::calls::{node_stacks_reply, stacks_reply, Calls, Part, SlotReply};
use crate::limiter::{KeyId, Limits, RateLimit};
use crate::store::{Offence, Subject};

fn kept<T>(value: T) -> &'static T {
    Box::leak(Box::new(value))
}

/// A client's 3 a minute and its network's 4 an hour (`key=`).
fn keyed(client: &'static [u8], net: &'static [u8]) -> Subject<'static> {
    let mut limits = Limits::one(RateLimit {
        requests: 3,
        window_ms: 60_000,
    });
    let hourly = RateLimit {
        requests: 4,
        window_ms: 3_600_000,
    };
    limits
        .push_keyed(hourly, None, Some(KeyId::of("$pow_shield_net")))
        .unwrap();
    Subject {
        key: client,
        limits: kept(limits),
        key_values: kept([None, Some(net)]),
        rules: Default::default(),
        rising: false,
    }
}

/// Calls of a Redis Cluster's scripts under their own prefix, loaded.
fn calls(redis: &mut Redis, how: &str) -> Calls {
    let calls = Calls::new(
        &format!("node-test:{}:{how}:", std::process::id()),
        7,
        1,
        true,
    );
    for script in calls.scripts() {
        redis.call(&[b"SCRIPT", b"LOAD", script.as_bytes()]);
    }
    calls
}

/// Three requests' parts by slot: the client's of each, then their
/// network's (two addresses of one /24: its slot holds two parts).
fn slots(calls: &Calls, round: u64) -> Vec<Vec<(Part, u64)>> {
    let requests = [
        (&b"10.0.0.1"[..], &b"10.0.0.0/24"[..]),
        (b"10.0.0.2", b"10.0.0.0/24"),
        (b"10.0.9.9", b"10.0.9.0/24"),
    ];
    let mut clients = Vec::new();
    let mut nets: Vec<Vec<(Part, u64)>> = Vec::new();
    for (i, (client, net)) in requests.into_iter().enumerate() {
        let tag = crate::redis::command::client_tag(client);
        let seq = round * 10 + i as u64;
        let [own, theirs]: [Part; 2] = calls
            .parts(
                tag.as_bytes(),
                &keyed(kept(client.to_vec()), kept(net.to_vec())),
                Offence::Unpaid,
            )
            .try_into()
            .unwrap();
        clients.push(vec![(own, seq)]);
        match nets.iter_mut().find(|n| n[0].0.route == theirs.route) {
            Some(n) => n.push((theirs, seq)),
            None => nets.push(vec![(theirs, seq)]),
        }
    }
    clients.into_iter().chain(nets).collect()
}

fn refs(slots: &[Vec<(Part, u64)>]) -> Vec<Vec<(&Part, u64)>> {
    slots
        .iter()
        .map(|s| s.iter().map(|(p, q)| (p, *q)).collect())
        .collect()
}

/// Each request's integers, times and the slot's generation cut to
/// whether they are set (the calls compared run a few ms apart, each
/// prefix's generation made when it first refuses).
fn shaped(text: &[u8], n: usize) -> Vec<Vec<i64>> {
    let shape = |r: Vec<i64>| -> Vec<i64> {
        r.iter()
            .enumerate()
            .map(|(i, v)| match i {
                2 | 3 | 7 | 10 => i64::from(*v > 0),
                _ => *v,
            })
            .collect()
    };
    stacks_reply(text, n, true)
        .unwrap()
        .into_iter()
        .map(shape)
        .collect()
}

#[test]
fn each_slot_of_a_masters_call_answers_as_its_own_gathered_call() {
    let Some(mut redis) =
        Redis::connect("each_slot_of_a_masters_call_answers_as_its_own_gathered_call")
    else {
        return;
    };
    let (alone, together) = (calls(&mut redis, "alone"), calls(&mut redis, "together"));
    // Five rounds: the network's 4 an hour refuses the /24 of two
    // addresses in its third round, the client's 3 a minute the lone
    // address in its fourth.
    for round in 0..5 {
        let (a, t) = (slots(&alone, round), slots(&together, round));
        let (a, t) = (refs(&a), refs(&t));
        let each: Vec<&[(&Part, u64)]> = t.iter().map(Vec::as_slice).collect();
        let call = together.node_stacks(&each).unwrap();
        let reply = redis.raw(&call.evalsha);
        let replies = node_stacks_reply(&reply, t.len()).unwrap_or_else(|| panic!("{reply:?}"));
        for ((slot, own), reply) in a.iter().zip(&t).zip(replies) {
            let alone_reply = redis.raw(&alone.stacks(slot).evalsha);
            let (SlotReply::Ran(OwnedFrame::BulkString(text)), OwnedFrame::BulkString(expected)) =
                (reply, &alone_reply)
            else {
                panic!("round {round}: {alone_reply:?}");
            };
            assert_eq!(
                shaped(text, own.len()),
                shaped(expected, slot.len()),
                "round {round}"
            );
        }
    }
}

#[test]
fn a_late_masters_call_writes_nothing_in_any_slot() {
    let Some(mut redis) = Redis::connect("a_late_masters_call_writes_nothing_in_any_slot") else {
        return;
    };
    let calls = calls(&mut redis, "late");
    let slots = slots(&calls, 0);
    let parts = refs(&slots);
    let each: Vec<&[(&Part, u64)]> = parts.iter().map(Vec::as_slice).collect();
    let mut call = calls.node_stacks(&each).unwrap();
    assert!(crate::redis::clock::stamp(&mut call.evalsha, 1));
    let reply = redis.raw(&call.evalsha);
    let replies = node_stacks_reply(&reply, parts.len()).unwrap();
    for reply in replies {
        let SlotReply::Ran(frame) = reply else {
            panic!("{reply:?}")
        };
        assert!(
            crate::redis::clock::expired_ms(frame).is_some(),
            "{frame:?}"
        );
    }
    let prefix = format!("node-test:{}:late:*", std::process::id());
    let keys = redis.call(&[b"KEYS", prefix.as_bytes()]);
    assert_eq!(keys, OwnedFrame::Array(vec![]), "nothing written");
}

/// Redis's CPU (INFO commandstats, usec of EVALSHA) of a master's call of
/// eight slots against the same parts alone: `cargo test -p
/// pow-shield-core redis_cost_of_a_masters_call -- --ignored --nocapture`.
#[test]
#[ignore]
fn redis_cost_of_a_masters_call() {
    let Some(mut redis) = Redis::connect("redis_cost_of_a_masters_call") else {
        return;
    };
    let usec = |redis: &mut Redis| -> u64 {
        let OwnedFrame::BulkString(text) = redis.call(&[b"INFO", b"commandstats"]) else {
            panic!()
        };
        let text = String::from_utf8_lossy(&text).into_owned();
        let line = text
            .lines()
            .find(|l| l.starts_with("cmdstat_evalsha:"))
            .unwrap_or("");
        line.split(',')
            .find_map(|f| f.strip_prefix("usec="))
            .map_or(0, |v| v.parse().unwrap())
    };
    let (alone, together) = (
        calls(&mut redis, "cost-alone"),
        calls(&mut redis, "cost-together"),
    );
    let rounds = 300u64;
    let (mut a_us, mut t_us, mut parts_n) = (0, 0, 0);
    for round in 0..rounds {
        let a = slots(&alone, round + 100);
        let t = slots(&together, round + 100);
        // (Green: each round on empty keys, as new clients.)
        redis.call(&[b"FLUSHDB"]);
        let before = usec(&mut redis);
        for slot in refs(&a) {
            for (part, seq) in slot {
                redis.raw(&alone.alone(part, seq).evalsha);
                parts_n += 1;
            }
        }
        let mid = usec(&mut redis);
        let t = refs(&t);
        let each: Vec<&[(&Part, u64)]> = t.iter().map(Vec::as_slice).collect();
        redis.call(&[b"FLUSHDB"]);
        let mid = usec(&mut redis).max(mid);
        redis.raw(&together.node_stacks(&each).unwrap().evalsha);
        let after = usec(&mut redis);
        a_us += mid - before;
        t_us += after - mid;
    }
    eprintln!(
        "parts alone: {:.1} us a part; in a master's call: {:.1} us a part",
        a_us as f64 / parts_n as f64,
        t_us as f64 / parts_n as f64
    );
}

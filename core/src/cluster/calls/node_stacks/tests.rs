//! A master's call: each slot's words as that slot's gathered call has
//! them, and what its reply says of each slot.

use super::*;
use crate::cluster::scripts::Scripts;
use crate::limiter::{KeyId, Limits, RateLimit};
use crate::store::{Offence, Subject, CLIENT_KEYS};

/// The words of an encoded RESP array.
fn words(command: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = command.iter().position(|b| *b == b'\n').unwrap() + 1;
    while at < command.len() {
        let line_end = at + command[at..].iter().position(|b| *b == b'\n').unwrap();
        let len: usize = std::str::from_utf8(&command[at + 1..line_end - 1])
            .unwrap()
            .parse()
            .unwrap();
        out.push(command[line_end + 1..line_end + 1 + len].to_vec());
        at = line_end + 1 + len + 2;
    }
    out
}

fn kept<T>(value: T) -> &'static T {
    Box::leak(Box::new(value))
}

/// A client's 5 a minute and its network's 100 an hour (`key=`).
fn keyed(client: &'static [u8], net: &'static [u8]) -> Subject<'static> {
    let mut limits = Limits::one(RateLimit {
        requests: 5,
        window_ms: 60_000,
    });
    let hourly = RateLimit {
        requests: 100,
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

/// Two requests' parts (a client's and its network's each, four slots).
fn parts(calls: &Calls) -> Vec<Part> {
    let _ = CLIENT_KEYS;
    let mut out = calls.parts(
        b"0a000001",
        &keyed(b"10.0.0.1", b"10.0.0.0/24"),
        Offence::Unpaid,
    );
    out.extend(calls.parts(
        b"0a000102",
        &keyed(b"10.0.1.2", b"10.0.1.0/24"),
        Offence::Unpaid,
    ));
    assert_eq!(out.len(), 4, "two slots a request");
    out
}

#[test]
fn each_slot_goes_with_the_words_of_its_own_gathered_call_and_the_deadline_last() {
    let calls = Calls::new("ps:", 7, 1, true);
    let parts = parts(&calls);
    let slots: Vec<Vec<(&Part, u64)>> =
        vec![vec![(&parts[0], 1), (&parts[2], 2)], vec![(&parts[1], 1)]];
    let each: Vec<&[(&Part, u64)]> = slots.iter().map(Vec::as_slice).collect();
    let call = calls.node_stacks(&each).unwrap();
    let node = &Scripts::for_mode(true).parts.as_ref().unwrap().node;
    assert_eq!(call.script, node.text);
    assert!(call
        .script
        .starts_with("#!lua flags=allow-cross-slot-keys\n"));
    let w = words(&call.evalsha);
    assert_eq!(
        w[..3],
        [
            b"EVALSHA".to_vec(),
            node.sha1.clone().into_bytes(),
            b"0".to_vec()
        ]
    );
    assert_eq!(w[3], b"2", "two slots");
    let mut at = 4;
    for slot in &slots {
        // The slot's own gathered call: EVALSHA sha numkeys keys args deadline.
        let own = words(&calls.stacks(slot).evalsha);
        let keys: usize = std::str::from_utf8(&own[2]).unwrap().parse().unwrap();
        let (own_keys, own_args) = own[3..].split_at(keys);
        let own_args = &own_args[..own_args.len() - 1];
        assert_eq!(w[at], keys.to_string().into_bytes());
        assert_eq!(&w[at + 1..at + 1 + keys], own_keys);
        at += 1 + keys;
        assert_eq!(w[at], own_args.len().to_string().into_bytes());
        assert_eq!(&w[at + 1..at + 1 + own_args.len()], own_args);
        at += 1 + own_args.len();
    }
    assert_eq!(w.len(), at + 1, "the deadline last, once");
    assert!(crate::redis::clock::stamp(
        &mut call.evalsha.clone(),
        1_765_000_000_000
    ));
}

#[test]
fn one_redis_has_no_masters_call() {
    let calls = Calls::new("ps:", 7, 1, false);
    let part = calls.whole(
        b"0a000001",
        &keyed(b"10.0.0.1", b"10.0.0.0/24"),
        Offence::Unpaid,
    );
    assert_eq!(calls.node_stacks(&[&[(&part, 1)]]), None);
}

#[test]
fn a_masters_reply_gives_each_slot_its_own_reply_or_not_local() {
    let ran = OwnedFrame::BulkString(b"1 4 60000 0 0 0 0 0 0 0 0".to_vec());
    let late = OwnedFrame::SimpleString(b"EXPIRED 1765000000123".to_vec());
    let not_local = OwnedFrame::SimpleString(b"NOTLOCAL".to_vec());
    let reply = OwnedFrame::Array(vec![ran.clone(), not_local.clone(), late.clone()]);
    let cases: [(&OwnedFrame, usize, Option<Vec<SlotReply>>); 5] = [
        (
            &reply,
            3,
            Some(vec![
                SlotReply::Ran(&ran),
                SlotReply::NotLocal,
                SlotReply::Ran(&late),
            ]),
        ),
        (&reply, 2, None),
        (&ran, 1, None),
        (
            &OwnedFrame::Error("ERR Error running script".into()),
            1,
            None,
        ),
        (&OwnedFrame::Array(vec![]), 0, Some(vec![])),
    ];
    for (frame, slots, expected) in cases {
        assert_eq!(
            node_stacks_reply(frame, slots),
            expected,
            "{frame:?} of {slots}"
        );
    }
}

#[test]
fn a_masters_call_holds_no_more_slots_than_a_reply_may_have_elements() {
    assert!(MAX_SLOTS <= MAX_ELEMENTS && MAX_SLOTS <= MAX_GATHERED);
}

//! What a Redis Cluster node may answer about the cluster (`redis::cluster`
//! and `redis::command::decode_topology`): a `CLUSTER SLOTS` reply read into
//! the routing table, a `MOVED` / `ASK` / `TRYAGAIN` error text, and the
//! slot of a key as the module writes its keys.
//!
//! Input: one byte choosing the part (`% 3`), then its bytes:
//! 0 a `CLUSTER SLOTS` reply; 1 an error reply's text; 2 a
//! `pow_shield_redis prefix=` value and a client key, split at the first 0.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pow_shield_core::redis::cluster::*;
use pow_shield_core::redis::command::{client_tag, decode_reply, decode_topology, Decoded};

/// The node that answered, for masters announced without a host.
const SEEN_FROM: &str = "10.0.0.9";

fuzz_target!(|data: &[u8]| {
    let [which, rest @ ..] = data else {
        return;
    };
    match which % 3 {
        0 => topology(rest),
        1 => {
            if let Ok(text) = std::str::from_utf8(rest) {
                redirect(text);
            }
        }
        _ => {
            let (prefix, key) = match rest.iter().position(|b| *b == 0) {
                Some(at) => (&rest[..at], &rest[at + 1..]),
                None => (&[][..], rest),
            };
            slot_of_keys(prefix, key);
        }
    }
});

fn topology(buf: &[u8]) {
    let (frame, used) = match decode_topology(buf) {
        Decoded::Frame(frame, used) => (frame, used),
        Decoded::Partial | Decoded::Corrupt(_) => return,
    };
    assert!(used > 0 && used <= buf.len());
    // The same reply in fragments: nothing until its last byte, then the
    // same frame, whatever follows it.
    assert_eq!(
        decode_topology(&buf[..used]),
        Decoded::Frame(frame.clone(), used)
    );
    for end in [0, used / 2, used - 1] {
        assert_eq!(
            decode_topology(&buf[..end]),
            Decoded::Partial,
            "{end} of {used}"
        );
    }
    // A reply that is not a map decodes as any reply would.
    if let Decoded::Frame(flat, n) = decode_reply(buf) {
        assert_eq!((flat, n), (frame.clone(), used));
    }
    let Ok(ranges) = parse_slots(&frame.as_owned(), SEEN_FROM) else {
        return;
    };
    let mut expected = vec![None; SLOTS];
    let mut masters: Vec<NodeAddr> = Vec::new();
    let mut index = |node: &NodeAddr| match masters.iter().position(|m| m == node) {
        Some(i) => i,
        None => {
            masters.push(node.clone());
            masters.len() - 1
        }
    };
    for range in &ranges {
        assert!(range.first <= range.last && usize::from(range.last) < SLOTS);
        assert!(range.master.port > 0);
        // Announced addresses are written into log lines and resolved:
        // they print as they parse.
        let text = range.master.to_string();
        assert_eq!(
            NodeAddr::parse(&text).as_ref(),
            Some(&range.master),
            "{text:?}"
        );
        let node = index(&range.master);
        for slot in range.first..=range.last {
            expected[usize::from(slot)] = Some(node);
        }
    }
    let mut routes = Routes::default();
    let changed = routes.replace(&ranges, &mut index);
    assert_eq!(changed, expected.iter().any(Option::is_some));
    for (slot, owner) in expected.iter().enumerate() {
        assert_eq!(routes.owner(slot as u16), *owner, "slot {slot}");
    }
    assert!(!routes.replace(&ranges, &mut index), "the same map twice");
}

fn redirect(text: &str) {
    let Some(redirect) = parse_redirect(text) else {
        return;
    };
    let (kind, slot, node) = match redirect {
        Redirect::TryAgain => {
            assert!(text.starts_with("TRYAGAIN"));
            return;
        }
        Redirect::Moved { slot, ref node } => ("MOVED", slot, node),
        Redirect::Ask { slot, ref node } => ("ASK", slot, node),
    };
    assert!(usize::from(slot) < SLOTS);
    assert!(node.port > 0);
    assert!(
        !node.host.is_empty()
            && !node
                .host
                .contains(|c: char| c.is_whitespace() || c.is_control()),
        "{text:?}"
    );
    // Written back as Redis writes it, it reads the same.
    let again = format!("{kind} {slot} {node}");
    assert_eq!(
        parse_redirect(&again).as_ref(),
        Some(&redirect),
        "{again:?}"
    );
}

/// Every key of a client shares its hash tag, whatever the prefix, so the
/// script's keys sit in one slot.
fn slot_of_keys(prefix: &[u8], key: &[u8]) {
    let Ok(prefix) = std::str::from_utf8(prefix) else {
        return;
    };
    // What `apply_redis_option` accepts as a prefix.
    if prefix.len() > 64
        || !prefix
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'{' && b != b'}')
    {
        return;
    }
    // An empty key exempts the request: it never reaches a store.
    if key.is_empty() {
        return;
    }
    let slot = key_slot(key);
    assert!(usize::from(slot) < SLOTS);
    let tag = client_tag(key);
    let expected = usize::from(crc16(tag.as_bytes())) % SLOTS;
    for suffix in [":w:10:60000", ":spent:0123456789abcdef", "", "}{x}"] {
        let name = format!("{prefix}{{{tag}}}{suffix}");
        assert_eq!(usize::from(key_slot(name.as_bytes())), expected, "{name}");
    }
}

//! The cluster map, slots and redirections, as Redis 7 answers them.

use super::*;

fn addr(port: u16) -> NodeAddr {
    NodeAddr {
        host: "10.0.0.1".to_owned(),
        port,
    }
}

fn announced(r: &mut Roster, port: u16) -> usize {
    let i = match r.place(&addr(port)) {
        Place::New(i) | Place::Reuse(i) | Place::Revive(i) | Place::Live(i) => i,
        Place::Full => panic!("full"),
    };
    r.placed(i, &addr(port));
    i
}

#[test]
fn a_node_absent_from_the_map_while_down_is_retired() {
    let mut r = Roster::new(64);
    let a = announced(&mut r, 1);
    let b = announced(&mut r, 2);
    assert_eq!(r.on_map(|i| i == a, |_| true), vec![b]);
    assert!(r.is_retired(b) && !r.is_retired(a));
    assert_eq!(r.on_map(|i| i == a, |_| true), Vec::<usize>::new(), "once");
}

#[test]
fn a_node_absent_but_up_is_retired_after_a_few_maps() {
    let mut r = Roster::new(64);
    let a = announced(&mut r, 1);
    for _ in 1..RETIRE_AFTER_MAPS {
        assert!(r.on_map(|_| false, |_| false).is_empty());
    }
    assert_eq!(r.on_map(|_| false, |_| false), vec![a]);
}

#[test]
fn a_map_naming_a_node_resets_its_absence() {
    let mut r = Roster::new(64);
    let a = announced(&mut r, 1);
    for _ in 1..RETIRE_AFTER_MAPS {
        r.on_map(|_| false, |_| false);
    }
    r.on_map(|_| true, |_| false);
    assert!(r.on_map(|_| false, |_| false).is_empty());
    assert!(!r.is_retired(a));
}

#[test]
fn seeds_are_never_retired() {
    let mut r = Roster::new(64);
    let seed = r.add_seed(addr(1));
    for _ in 0..10 {
        assert!(r.on_map(|_| false, |_| true).is_empty());
    }
    assert_eq!(r.place(&addr(1)), Place::Live(seed));
}

#[test]
fn a_retired_node_announced_again_keeps_its_index() {
    let mut r = Roster::new(64);
    let _seed = r.add_seed(addr(1));
    let b = announced(&mut r, 2);
    r.on_map(|i| i != b, |_| true);
    assert_eq!(r.place(&addr(2)), Place::Revive(b));
    assert_eq!(announced(&mut r, 2), b);
    assert!(!r.is_retired(b));
}

#[test]
fn beyond_the_cap_a_retired_entry_is_reused_else_refused() {
    let mut r = Roster::new(2);
    let a = announced(&mut r, 1);
    let b = announced(&mut r, 2);
    assert_eq!(r.place(&addr(3)), Place::Full);
    r.on_map(|i| i == a, |i| i == b);
    assert_eq!(r.place(&addr(3)), Place::Reuse(b));
    assert_eq!(announced(&mut r, 3), b);
    assert_eq!(r.place(&addr(2)), Place::Full, "its old address is gone");
    assert_eq!(r.place(&addr(3)), Place::Live(b));
}

#[test]
fn crc16_matches_the_cluster_spec_test_vector() {
    // Redis Cluster specification, appendix A: "123456789" -> 0x31C3.
    assert_eq!(crc16(b"123456789"), 0x31C3);
    assert_eq!(crc16(b""), 0);
}

#[test]
fn key_slots_match_redis() {
    // As CLUSTER KEYSLOT answers on Redis 7.
    assert_eq!(key_slot(b"foo"), 12182);
    assert_eq!(key_slot(b"bar"), 5061);
    assert_eq!(key_slot(b"123456789"), 0x31C3);
}

#[test]
fn a_hash_tag_decides_the_slot() {
    assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
    assert_eq!(key_slot(b"{user1000}.followers"), key_slot(b"user1000"));
    assert_eq!(key_slot(b"pow:{6162}:w:3:60000"), key_slot(b"6162"));
    assert_eq!(key_slot(b"pow:spent:{ab12}"), key_slot(b"ab12"));
}

#[test]
fn only_the_first_non_empty_tag_counts() {
    // The spec's examples: "foo{}{bar}" hashes whole; "foo{{bar}}zap"
    // hashes "{bar"; "foo{bar}{zap}" hashes "bar".
    assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
    assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
    assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
    assert_eq!(key_slot(b"foo{bar"), crc16(b"foo{bar") % 16384);
}

fn node(host: &str, port: u16) -> NodeAddr {
    NodeAddr {
        host: host.to_owned(),
        port,
    }
}

#[test]
fn moved_ask_and_tryagain_are_read() {
    assert_eq!(
        parse_redirect("MOVED 3999 127.0.0.1:6381"),
        Some(Redirect::Moved {
            slot: 3999,
            node: node("127.0.0.1", 6381)
        })
    );
    assert_eq!(
        parse_redirect("ASK 3999 [::1]:7000"),
        Some(Redirect::Ask {
            slot: 3999,
            node: node("::1", 7000)
        })
    );
    assert_eq!(
        parse_redirect("TRYAGAIN Multiple keys request during rehashing of slot"),
        Some(Redirect::TryAgain)
    );
}

#[test]
fn other_errors_are_not_redirections() {
    for text in [
        "WRONGTYPE Operation against a key",
        "MOVED",
        "MOVED 16384 127.0.0.1:1",
        "MOVED x 127.0.0.1:1",
        "MOVED 1 127.0.0.1",
        "MOVED 1 127.0.0.1:0",
        "ASK 1 bad\nhost:1",
        "CLUSTERDOWN The cluster is down",
    ] {
        assert_eq!(parse_redirect(text), None, "{text}");
    }
}

fn bulk(s: &str) -> OwnedFrame {
    OwnedFrame::BulkString(s.as_bytes().to_vec())
}

fn range(first: i64, last: i64, host: &str, port: i64) -> OwnedFrame {
    OwnedFrame::Array(vec![
        OwnedFrame::Integer(first),
        OwnedFrame::Integer(last),
        OwnedFrame::Array(vec![bulk(host), OwnedFrame::Integer(port), bulk("id1")]),
        OwnedFrame::Array(vec![bulk(host), OwnedFrame::Integer(port + 1), bulk("id2")]),
    ])
}

#[test]
fn a_cluster_slots_reply_gives_each_range_its_master() {
    let reply = OwnedFrame::Array(vec![
        range(0, 5460, "127.0.0.1", 7000),
        range(5461, 10922, "127.0.0.1", 7001),
        range(10923, 16383, "", 7002),
    ]);
    let ranges = parse_slots(&reply, "10.0.0.9").unwrap();
    assert_eq!(
        ranges,
        [
            SlotRange {
                first: 0,
                last: 5460,
                master: node("127.0.0.1", 7000)
            },
            SlotRange {
                first: 5461,
                last: 10922,
                master: node("127.0.0.1", 7001)
            },
            SlotRange {
                first: 10923,
                last: 16383,
                master: node("10.0.0.9", 7002)
            },
        ]
    );
}

#[test]
fn a_master_announced_as_a_question_mark_is_reached_at_its_metadata_ip() {
    // As Redis 7.0 answers with `cluster-preferred-endpoint-type
    // hostname` for a node that has no hostname.
    let master = |meta: Vec<OwnedFrame>| {
        OwnedFrame::Array(vec![OwnedFrame::Array(vec![
            OwnedFrame::Integer(0),
            OwnedFrame::Integer(16383),
            OwnedFrame::Array(vec![
                bulk("?"),
                OwnedFrame::Integer(30001),
                bulk("id1"),
                OwnedFrame::Array(meta),
            ]),
        ])])
    };
    let ranges = parse_slots(&master(vec![bulk("ip"), bulk("10.0.0.7")]), "x").unwrap();
    assert_eq!(ranges[0].master, node("10.0.0.7", 30001));
    assert!(parse_slots(&master(vec![bulk("hostname"), bulk("n1")]), "x").is_err());
    assert!(parse_slots(&master(vec![bulk("ip"), bulk("bad host")]), "x").is_err());
}

#[test]
fn a_malformed_cluster_slots_reply_is_refused() {
    for reply in [
        OwnedFrame::Integer(1),
        OwnedFrame::Array(vec![OwnedFrame::Integer(1)]),
        OwnedFrame::Array(vec![range(10, 5, "h", 1)]),
        OwnedFrame::Array(vec![range(0, 16384, "h", 1)]),
        OwnedFrame::Array(vec![range(0, 1, "h", 0)]),
        OwnedFrame::Array(vec![range(0, 1, "h", 70000)]),
        OwnedFrame::Array(vec![range(0, 1, "bad host", 1)]),
        OwnedFrame::Array(vec![range(0, 16383, "h", 1), range(5, 5, "h", 2)]),
    ] {
        assert!(parse_slots(&reply, "x").is_err(), "{reply:?}");
    }
}

#[test]
fn routes_follow_the_map_and_moved() {
    let ranges = [
        SlotRange {
            first: 0,
            last: 99,
            master: node("a", 1),
        },
        SlotRange {
            first: 100,
            last: 16383,
            master: node("b", 1),
        },
    ];
    let mut routes = Routes::default();
    assert_eq!(routes.owner(5), None, "unknown before the map");
    assert!(!routes.mapped());
    let index = |n: &NodeAddr| usize::from(n.host == "b");
    assert!(routes.replace(&ranges, index));
    assert!(routes.mapped());
    assert_eq!((routes.owner(99), routes.owner(100)), (Some(0), Some(1)));
    assert!(!routes.replace(&ranges, index), "the same map: no change");
    routes.set(99, 1);
    assert_eq!(routes.owner(99), Some(1));
}

#[test]
fn routes_keep_node_indexes_below_their_byte_and_forget_larger_ones() {
    let mut routes = Routes::default();
    routes.set(7, Routes::MAX_NODE - 1);
    assert_eq!(
        routes.owner(7),
        Some(Routes::MAX_NODE - 1),
        "the largest kept"
    );
    routes.set(7, Routes::MAX_NODE);
    assert_eq!(
        routes.owner(7),
        None,
        "too large: unknown, not another node"
    );
    routes.set(8, 300);
    assert_eq!(routes.owner(8), None, "no wrap-around to node 44");
    let ranges = [SlotRange {
        first: 0,
        last: 16383,
        master: node("a", 1),
    }];
    routes.set(0, 2);
    assert!(routes.replace(&ranges, |_| 1000));
    assert_eq!(routes.owner(0), None, "a map's node too large: unknown");
    routes.set(16384, 1);
    assert_eq!(routes.owner(16384), None, "no slot past the last");
}

#[test]
fn a_routes_slot_is_its_keys_whether_it_is_a_key_or_a_tag() {
    for (route, key) in [
        (&b"@203.0.113.7"[..], &b"pow:{@203.0.113.7}:w:3:60000"[..]),
        (
            b"@key=203.0.113.0/24}{@203.0.113.7",
            b"pow:{@key=203.0.113.0/24}{@203.0.113.7}:s",
        ),
        (b"pow:{@203.0.113.7}:w:3:60000", b"{@203.0.113.7}"),
        (b"pow:gen:{17}", b"17"),
        (b"#abc", b"x{#abc}"),
    ] {
        assert_eq!(
            route_slot(route),
            key_slot(key),
            "{}",
            String::from_utf8_lossy(route)
        );
    }
    assert_eq!(
        route_slot(b"@key=203.0.113.0/24}{@203.0.113.7"),
        key_slot(b"@key=203.0.113.0/24")
    );
}

#[test]
fn the_byte_table_hashes_as_the_polynomial_a_bit_at_a_time() {
    fn bitwise(data: &[u8]) -> u16 {
        let mut crc: u16 = 0;
        for &byte in data {
            crc ^= u16::from(byte) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
        }
        crc
    }
    let every: Vec<u8> = (0..=255).collect();
    for len in 0..every.len() {
        assert_eq!(crc16(&every[..len]), bitwise(&every[..len]), "{len}");
        assert_eq!(crc16(&every[len..]), bitwise(&every[len..]), "{len}");
    }
    assert_eq!(crc16(b"123456789"), 0x31C3);
}

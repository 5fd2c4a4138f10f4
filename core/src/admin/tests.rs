use super::*;
use crate::limiter::breaker::StrikeRule;

const FIVE: BreakerRules = BreakerRules {
    strikes: Some(StrikeRule {
        threshold: 5,
        ttl_ms: 60_000,
    }),
    ban: None,
};

#[test]
fn the_key_is_the_first_key_argument_percent_decoded() {
    assert_eq!(key_of_query(b"key=192.0.2.7").unwrap(), b"192.0.2.7");
    assert_eq!(
        key_of_query(b"x=1&key=api%3A1041&key=other").unwrap(),
        b"api:1041"
    );
    assert_eq!(key_of_query(b"key=a+b").unwrap(), b"a b");
    assert_eq!(
        key_of_query(b"key=2001%3adb8%3A%3A%2F64").unwrap(),
        b"2001:db8::/64"
    );
}

#[test]
fn a_missing_empty_or_badly_encoded_key_is_a_bad_request() {
    assert_eq!(key_of_query(b""), Err(BadRequest::NoKey));
    assert_eq!(key_of_query(b"key="), Err(BadRequest::NoKey));
    assert_eq!(key_of_query(b"keys=1"), Err(BadRequest::NoKey));
    assert_eq!(key_of_query(b"key=%4"), Err(BadRequest::Encoding));
    assert_eq!(key_of_query(b"key=%zz"), Err(BadRequest::Encoding));
    let long = [b"key=".as_slice(), &[b'a'; MAX_KEY + 1]].concat();
    assert_eq!(key_of_query(&long), Err(BadRequest::TooLong));
}

#[test]
fn an_address_names_the_default_keys_client_and_the_text_itself() {
    let (keys, named) = store_keys(b"192.0.2.7");
    assert_eq!(named, Named::Address);
    assert_eq!(keys[0], b"\x00192.0.2.7");
    assert_eq!(keys[1], b"192.0.2.7");
    assert_eq!(keys[2], b"\x00dry\x00\x00192.0.2.7");
    assert_eq!(keys.len(), 4);
    // An IPv6 address is its /64, as $pow_shield_client writes it.
    let (v6, _) = store_keys(b"2001:db8:1:2:3:4:5:6");
    assert_eq!(v6[0], b"\x002001:db8:1:2::/64");
    let (net, _) = store_keys(b"2001:db8:1:2::/64");
    assert_eq!(net[0], b"\x002001:db8:1:2::/64");
}

#[test]
fn any_other_text_is_a_custom_key_only() {
    let (keys, named) = store_keys(b"api:1041");
    assert_eq!(named, Named::Custom);
    assert_eq!(
        keys,
        [b"api:1041".to_vec(), b"\x00dry\x00api:1041".to_vec()]
    );
    assert_eq!(store_keys(b"192.0.2.7/64").1, Named::Custom);
}

#[test]
fn the_view_says_the_block_under_the_rules_and_when_it_ends() {
    let mut c = StrikeCounter::default();
    for _ in 0..5 {
        c.strike(FIVE, 1_000);
    }
    let view = BreakerView::of_counter(&c, 11_000);
    assert_eq!(view.strikes, 5);
    assert_eq!(view.strikes_ms, 50_000);
    assert_eq!(view.block(FIVE), (Block::Blocked, 50_000));
    assert_eq!(view.block(BreakerRules::default()), (Block::Clear, 0));
    let banned = BreakerView {
        trips: u32::from(BANNED_TRIPS),
        trips_ms: 9_000,
        ..BreakerView::default()
    };
    assert_eq!(banned.block(FIVE), (Block::Banned, 9_000));
}

#[test]
fn the_show_reply_reads_the_breaker_then_each_limit() {
    let limits = [(
        RateLimit {
            requests: 5,
            window_ms: 60_000,
        },
        false,
    )];
    let view = show_reply(&[3, 40_000, 0, 0, 2, 5, 12_000], &limits).unwrap();
    assert_eq!(view.breaker.strikes, 3);
    assert_eq!(view.breaker.unpaid, 2);
    assert_eq!((view.limits[0].count, view.limits[0].reset_ms), (5, 12_000));
    assert_eq!(show_reply(&[3, 40_000, 0, 0, 2], &limits), None);
    assert_eq!(show_reply(&[-1, 0, 0, 0, 0, 0, 0], &limits), None);
}

#[test]
fn the_json_names_the_key_the_mode_and_each_stores_state() {
    let node = StoreView {
        breaker: BreakerView {
            strikes: 5,
            strikes_ms: 30_000,
            ..BreakerView::default()
        },
        ..StoreView::default()
    };
    let json = view_json(b"a\"b", Named::Custom, FIVE, &node, &FromRedis::Unavailable);
    assert!(json.starts_with("{\"key\":\"a\\\"b\",\"as\":\"custom\",\"mode\":\"cluster\""));
    assert!(json.contains("\"block\":\"blocked\",\"block_ends_in_ms\":30000"));
    assert!(json.contains("\"redis\":{\"error\":\"unavailable\"}"));
    let lifted = lifted_json(b"192.0.2.7", Named::Address, false, &FromRedis::None);
    assert_eq!(
        lifted,
        "{\"key\":\"192.0.2.7\",\"as\":\"address\",\"mode\":\"local\",\"lifted\":{\"node\":true}}\n"
    );
    assert_eq!(error_json("x"), "{\"error\":\"x\"}\n");
}

#[test]
fn a_lift_deletes_the_clients_breaker_keys_in_one_command() {
    let default_key = b"\x00192.0.2.7";
    let cmd = String::from_utf8(lift_command(
        ("pow:", ClientSlot::Own),
        Counted::Client(default_key),
        &[],
    ))
    .unwrap();
    assert!(cmd.starts_with("*5\r\n$3\r\nDEL\r\n"));
    for suffix in [":s", ":t", ":u", ":c"] {
        assert!(
            cmd.contains(&format!("pow:{{@192.0.2.7}}{suffix}\r\n")),
            "{cmd}"
        );
    }
}

fn net_limit() -> KeyedLimit {
    KeyedLimit {
        name: LimitName::new("net").unwrap(),
        limit: RateLimit {
            requests: 40,
            window_ms: 3_600_000,
        },
        approx: false,
    }
}

fn named(name: &str, requests: u32, approx: bool) -> KeyedLimit {
    KeyedLimit {
        name: LimitName::new(name).unwrap(),
        limit: RateLimit {
            requests,
            window_ms: 60_000,
        },
        approx,
    }
}

#[test]
fn a_lift_clears_each_readings_breaker_and_with_keyed_limits_the_values_counts() {
    // (key, keyed limits configured, breakers cleared, values cleared)
    type Row<'a> = (&'a [u8], &'a [KeyedLimit], usize, Vec<Vec<u8>>);
    let net = b"198.51.100.0/24".as_slice();
    let rows: [Row; 4] = [
        (b"192.0.2.7", &[], 4, vec![]),
        (b"api:1041", &[], 2, vec![]),
        (
            net,
            &[net_limit()],
            2,
            vec![net.to_vec(), [DRY_RUN, net].concat()],
        ),
        (
            b"site",
            &[net_limit()],
            2,
            vec![b"site".to_vec(), b"\0dry\0site".to_vec()],
        ),
    ];
    for (key, keyed, breakers, values) in rows {
        let lift = Lift::of(key, keyed);
        assert_eq!(lift.breakers, store_keys(key).0, "{key:?}");
        assert_eq!(lift.breakers.len(), breakers, "{key:?}");
        assert_eq!(lift.values, values, "{key:?}");
        assert_eq!(lift.calls(), breakers + lift.values.len());
    }
}

#[test]
fn the_view_lists_each_keyed_limit_once_by_its_first_name() {
    let mut keyed = Vec::new();
    for seen in [
        named("net", 40, false),
        named("net2", 40, false), // same numbers and kind: one count
        named("neta", 40, true),  // approx: another count
        named("site", 1000, false),
    ] {
        note_keyed(&mut keyed, seen, 3);
    }
    let names: Vec<&str> = keyed.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["net", "neta", "site"]);
    note_keyed(&mut keyed, named("more", 7, false), 3);
    assert_eq!(keyed.len(), 3, "at most `most`");
}

#[test]
fn a_values_keys_are_under_its_own_tag_and_its_lift_deletes_its_counts() {
    let net = b"198.51.100.0/24".as_slice();
    let own = crate::cluster::keys::own_tag(net);
    assert_eq!(own, "@key=198.51.100.0/24");
    assert_eq!(tag_of(Counted::Own(net), ClientSlot::Own).text(), own);
    assert_ne!(tag_of(Counted::Client(net), ClientSlot::Own).text(), own);
    let call = show_call(
        ("pow:", ClientSlot::Own),
        Counted::Own(net),
        &[(net_limit().limit, false)],
    );
    let call = String::from_utf8_lossy(&call.evalsha).into_owned();
    assert!(
        call.contains(&format!("pow:{{{own}}}:w:40:3600000")),
        "{call}"
    );
    let cmd = lift_command(
        ("pow:", ClientSlot::Own),
        Counted::Own(net),
        &[(net_limit().limit, false)],
    );
    let cmd = String::from_utf8(cmd).unwrap();
    assert!(cmd.starts_with("*4\r\n$3\r\nDEL\r\n"), "{cmd}");
    for kind in [":w:", ":a:", ":o:"] {
        assert!(
            cmd.contains(&format!("pow:{{{own}}}{kind}40:3600000\r\n")),
            "{cmd}"
        );
    }
    assert!(!cmd.contains(":s\r\n"), "a value has no breaker to delete");
}

fn counts(count: u32) -> StoreView {
    StoreView {
        limits: vec![LimitView {
            name: None,
            limit: net_limit().limit,
            approx: false,
            count,
            reset_ms: 5,
        }],
        ..StoreView::default()
    }
}

#[test]
fn redis_answers_once_the_last_reply_is_in_and_only_if_every_call_was_answered() {
    let client = StoreView {
        breaker: BreakerView {
            strikes: 2,
            ..BreakerView::default()
        },
        ..counts(1)
    };
    // A view with a keyed call: the client's breaker and counts, the
    // value's counts named.
    let mut a = Answers::view(true);
    assert_eq!(a.shown(Part::Keyed, Some(counts(37)), &[net_limit()]), None);
    let Some(FromRedis::Answered(view)) =
        a.shown(Part::Client, Some(client.clone()), &[net_limit()])
    else {
        panic!("answered");
    };
    assert_eq!(view.breaker.strikes, 2);
    assert_eq!(view.limits, client.limits);
    assert_eq!(view.keyed[0].name, Some(net_limit().name));
    assert_eq!(view.keyed[0].count, 37);
    // Without keyed limits: one call.
    let mut a = Answers::view(false);
    assert!(matches!(
        a.shown(Part::Client, Some(client), &[]),
        Some(FromRedis::Answered(_))
    ));
    // One call unanswered: unavailable.
    let mut a = Answers::view(true);
    assert_eq!(a.shown(Part::Client, None, &[net_limit()]), None);
    assert_eq!(
        a.shown(Part::Keyed, Some(counts(3)), &[net_limit()]),
        Some(FromRedis::Unavailable)
    );
    // A lift: every DEL taken, or unavailable.
    let rows: [(&[bool], FromRedis); 3] = [
        (&[true, true, true], FromRedis::Lifted),
        (&[true, false, true], FromRedis::Unavailable),
        (&[false], FromRedis::Unavailable),
    ];
    for (replies, answer) in rows {
        let mut a = Answers::lift(replies.len());
        let mut last = None;
        for &ok in replies {
            assert_eq!(last, None, "only the last reply answers");
            last = a.lifted(ok);
        }
        assert_eq!(last, Some(answer), "{replies:?}");
    }
}

#[test]
fn the_json_lists_the_keys_counts_under_each_keyed_limit_by_name() {
    let node = StoreView {
        keyed: keyed_views(&counts(37).limits, &[net_limit()]),
        ..StoreView::default()
    };
    let json = view_json(
        b"198.51.100.0/24",
        Named::Custom,
        FIVE,
        &node,
        &FromRedis::None,
    );
    assert!(
        json.contains(
            "\"keyed\":[{\"limit\":\"net\",\"requests\":40,\"window_ms\":3600000,\
             \"approx\":false,\"count\":37,\"reset_in_ms\":5}]"
        ),
        "{json}"
    );
    assert!(json.contains("\"limits\":[],\"keyed\""), "{json}");
    let lifted = lifted_json(b"site", Named::Custom, true, &FromRedis::Lifted);
    assert!(lifted.ends_with("\"lifted\":{\"node\":true,\"keyed\":true,\"redis\":true}}\n"));
}

#[test]
fn with_slot_net_the_view_and_the_lift_read_a_clients_keys_in_its_networks_slot() {
    let key = b"\x00203.0.113.7".as_slice();
    let tag = "@key=203.0.113.0/24}{@203.0.113.7";
    assert_eq!(tag_of(Counted::Client(key), ClientSlot::Net).text(), tag);
    let call = show_call(("pow:", ClientSlot::Net), Counted::Client(key), &[]);
    let call = String::from_utf8_lossy(&call.evalsha).into_owned();
    assert!(call.contains(&format!("pow:{{{tag}}}:s")), "{call}");
    let cmd = lift_command(("pow:", ClientSlot::Net), Counted::Client(key), &[]);
    let cmd = String::from_utf8(cmd).unwrap();
    assert!(cmd.contains(&format!("pow:{{{tag}}}:s")), "{cmd}");
    // A value's own counts keep their tag.
    let net = b"203.0.113.0/24".as_slice();
    assert_eq!(
        tag_of(Counted::Own(net), ClientSlot::Net).text(),
        "@key=203.0.113.0/24"
    );
}

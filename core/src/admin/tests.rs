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
        limits: vec![],
    };
    let json = view_json(b"a\"b", Named::Custom, FIVE, &node, &FromRedis::Unavailable);
    assert!(json.starts_with("{\"key\":\"a\\\"b\",\"as\":\"custom\",\"mode\":\"cluster\""));
    assert!(json.contains("\"block\":\"blocked\",\"block_ends_in_ms\":30000"));
    assert!(json.contains("\"redis\":{\"error\":\"unavailable\"}"));
    let lifted = lifted_json(b"192.0.2.7", Named::Address, &FromRedis::None);
    assert_eq!(
        lifted,
        "{\"key\":\"192.0.2.7\",\"as\":\"address\",\"mode\":\"local\",\"lifted\":{\"node\":true}}\n"
    );
    assert_eq!(error_json("x"), "{\"error\":\"x\"}\n");
}

#[test]
fn a_lift_deletes_the_clients_breaker_keys_in_one_command() {
    let cmd = String::from_utf8(lift_command("pow:", b"k")).unwrap();
    assert!(cmd.starts_with("*5\r\n$3\r\nDEL\r\n"));
    for suffix in [":s", ":t", ":u", ":c"] {
        assert!(cmd.contains(&format!("pow:{{6b}}{suffix}\r\n")), "{cmd}");
    }
}

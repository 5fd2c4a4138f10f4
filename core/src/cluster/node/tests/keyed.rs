//! Stacked and keyed limits: a network (or the site) Redis refused is
//! refused on the node for every address it counts, until its `T`.

use super::*;
use crate::limiter::limits::KeyId;

const NET: RateLimit = RateLimit {
    requests: 3,
    window_ms: 60_000,
};

const PER_ADDRESS: RateLimit = RateLimit {
    requests: 2,
    window_ms: 60_000,
};

/// Per address (2 a minute), then per /24 (3 a minute, `key=$pow_shield_net`).
fn limits() -> Limits {
    let mut limits = Limits::default();
    limits.push(PER_ADDRESS, None).expect("one");
    limits
        .push_keyed(NET, None, Some(KeyId::of("$pow_shield_net")))
        .expect("two");
    limits
}

/// An unpaid request from `address` of the network `net`.
fn from(rig: &mut Rig, address: u8, net: &[u8]) -> (u32, Answered) {
    let key = [0, 198, 51, 100, address];
    let keys = [None, Some(net)];
    rig.ask_keyed(UNPAID, (&key, &keys), limits(), FailPolicy::Local)
}

fn refused_by(rig: &Rig, n: u32, answered: &Answered) -> Option<(u8, bool)> {
    let checked = match answered {
        Answered::Now(Reply::Checked(c)) => *c,
        _ => match rig.fate(n) {
            Some(Fate::Answered(Reply::Checked(c))) => *c,
            _ => return None,
        },
    };
    (!checked.verdict.allowed).then_some((checked.verdict.limit, checked.struck))
}

#[test]
fn a_network_redis_refused_is_refused_on_the_node_for_every_address_without_a_strike() {
    let Some(mut rig) = Rig::new("keyed_net") else {
        return;
    };
    let net: &[u8] = b"198.51.100.0/24";
    // Three addresses use up the /24's three; the fourth is refused by it.
    for address in 1..=3 {
        let (n, _) = from(&mut rig, address, net);
        rig.run_all();
        assert!(rig.admitted(n), "{:?}", rig.fate(n));
    }
    let (n, answered) = from(&mut rig, 4, net);
    rig.run_all();
    assert_eq!(refused_by(&rig, n, &answered), Some((1, false)));
    let calls = rig.calls_run;
    // A hundred new addresses of it: refused here, no call, no strike.
    for address in 5..105 {
        let (n, answered) = from(&mut rig, address, net);
        assert!(matches!(answered, Answered::Now(_)), "{answered:?}");
        assert_eq!(refused_by(&rig, n, &answered), Some((1, false)));
    }
    assert!(rig.held.is_empty());
    assert_eq!(rig.calls_run, calls);
    // Another network is not.
    let (n, answered) = from(&mut rig, 9, b"203.0.113.0/24");
    assert_eq!(answered, Answered::Later);
    rig.run_all();
    assert!(rig.admitted(n));
    // After `QUIET_FRESH_MS` Redis is asked once more, and says the same.
    rig.after(crate::cluster::refusals::QUIET_FRESH_MS);
    let (n, answered) = from(&mut rig, 200, net);
    assert_eq!(answered, Answered::Later);
    rig.run_all();
    assert_eq!(refused_by(&rig, n, &answered), Some((1, false)));
    let (_, answered) = from(&mut rig, 201, net);
    assert!(matches!(answered, Answered::Now(_)));
}

#[test]
fn a_client_over_its_own_limit_is_struck_first_even_while_its_network_is_refused() {
    let Some(mut rig) = Rig::new("keyed_own_first") else {
        return;
    };
    let net: &[u8] = b"192.0.2.0/24";
    // One address: two admitted, its third refused by its own limit.
    for _ in 0..2 {
        let (n, _) = from(&mut rig, 7, net);
        rig.run_all();
        assert!(rig.admitted(n));
    }
    let (n, answered) = from(&mut rig, 7, net);
    rig.run_all();
    assert_eq!(refused_by(&rig, n, &answered), Some((0, true)));
    // Refused here by its own limit, struck, and sent in its batch.
    let (n, answered) = from(&mut rig, 7, net);
    assert_eq!(refused_by(&rig, n, &answered), Some((0, true)));
    rig.after(crate::cluster::refusals::BATCH_MS).tick(false);
    rig.run_all();
    assert_eq!(rig.redis_int(&[0, 198, 51, 100, 7], ClientKey::Strikes), 2);
}

#[test]
fn on_a_redis_cluster_a_request_is_counted_by_every_slot_or_by_none() {
    let Some(mut rig) = Rig::cluster("sharded_net") else {
        return;
    };
    let net: &[u8] = b"198.51.100.0/24";
    // Each request: one call in the client's slot, one in the /24's.
    for address in 1..=3 {
        let (n, _) = from(&mut rig, address, net);
        assert_eq!(rig.held.len(), 2, "one call per slot");
        rig.run_all();
        assert!(rig.admitted(n), "{:?}", rig.fate(n));
    }
    // The fourth address: admitted in its own slot, refused in the /24's;
    // what its own slot counted is taken back, and nobody is struck.
    let (n, answered) = from(&mut rig, 4, net);
    rig.run_all();
    assert_eq!(refused_by(&rig, n, &answered), Some((1, false)));
    let fourth = [0, 198, 51, 100, 4];
    assert_eq!(rig.window(&fourth), 0, "counted by all or none");
    assert_eq!(rig.redis_int(&fourth, ClientKey::Strikes), 0);
    // New addresses of the refused /24 are refused here, whatever slot
    // their own counts live in.
    let calls = rig.calls_run;
    for address in 5..50 {
        let (n, answered) = from(&mut rig, address, net);
        assert_eq!(
            refused_by(&rig, n, &answered),
            Some((1, false)),
            "{answered:?}"
        );
    }
    assert_eq!(rig.calls_run, calls);
    // A client over its own limit in a network with room: refused in its
    // slot (struck), and the /24's count taken back.
    let other: &[u8] = b"203.0.113.0/24";
    let (mut last, mut answered) = from(&mut rig, 77, other);
    rig.run_all();
    for _ in 0..2 {
        (last, answered) = from(&mut rig, 77, other);
        rig.run_all();
    }
    assert_eq!(refused_by(&rig, last, &answered), Some((0, true)));
}

/// The script names of the held calls, in order (a Redis Cluster's).
fn held_scripts(rig: &Rig) -> Vec<&'static str> {
    let scripts = crate::cluster::scripts::Scripts::for_mode(true);
    rig.held
        .iter()
        .map(|(_, command)| match command {
            Command::Script(call) if call.script == scripts.window.text => "window",
            Command::Script(call) if call.script == scripts.approx.text => "approx",
            Command::Script(call) if call.script == scripts.stacked.text => "stacked",
            Command::Script(call) => match scripts.parts.iter().find_map(|p| {
                [&p.count, &p.counts, &p.standing]
                    .into_iter()
                    .find(|s| s.text == call.script)
            }) {
                Some(script) => script.name,
                None => "other",
            },
            Command::Plain(_) => "plain",
        })
        .collect()
}

#[test]
fn on_a_redis_cluster_a_part_of_one_limit_goes_alone_as_that_limits_own_script() {
    let Some(mut rig) = Rig::cluster("sharded_one_limit_parts") else {
        return;
    };
    let net: &[u8] = b"198.51.100.0/24";
    // The client's part (its own exact limit, its breaker): the window
    // script's call; the /24's (one exact count, no breaker): the count
    // script's.
    from(&mut rig, 1, net);
    assert_eq!(held_scripts(&rig), ["window", "count"]);
    rig.run_all();
    // Its /24's counter, `approx`.
    let mut limits = Limits::default();
    limits.push(PER_ADDRESS, None).expect("one");
    let approx = crate::limiter::Limit::new(NET)
        .approx()
        .keyed(KeyId::of("$pow_shield_net"));
    limits.add(approx).expect("two");
    let keys = [None, Some(net)];
    let key = [0, 198, 51, 100, 2];
    rig.ask_keyed(UNPAID, (&key, &keys), limits, FailPolicy::Local);
    assert_eq!(held_scripts(&rig), ["window", "count"]);
    rig.run_all();
    // The /24's limit only: the client's breaker alone in its slot.
    let mut keyed = Limits::default();
    keyed
        .push_keyed(NET, None, Some(KeyId::of("$pow_shield_net")))
        .expect("one");
    let keys = [Some(net)];
    let key = [0, 198, 51, 100, 4];
    rig.ask_keyed(UNPAID, (&key, &keys), keyed, FailPolicy::Local);
    assert_eq!(held_scripts(&rig), ["standing", "count"]);
    rig.run_all();
    // Two limits in one slot: the stacked script's.
    let mut two = Limits::default();
    two.push(PER_ADDRESS, None).expect("one");
    two.push(NET, None).expect("two");
    rig.ask(UNPAID, &[0, 198, 51, 100, 3], two, FailPolicy::Local);
    assert_eq!(held_scripts(&rig), ["stacked"]);
}

#[test]
fn on_a_redis_cluster_a_location_of_key_limits_only_is_decided_by_them() {
    let Some(mut rig) = Rig::cluster("sharded_keyed_only") else {
        return;
    };
    let mut limits = Limits::default();
    limits
        .push_keyed(NET, None, Some(KeyId::of("$pow_shield_net")))
        .expect("one");
    let keys = [Some(b"198.51.100.0/24".as_slice())];
    let mut fates = Vec::new();
    for address in 1..=4 {
        let key = [0, 198, 51, 100, address];
        let (n, answered) = rig.ask_keyed(UNPAID, (&key, &keys), limits, FailPolicy::Local);
        rig.run_all();
        fates.push(refused_by(&rig, n, &answered));
    }
    // The client's part holds no limit: its breaker only.
    assert_eq!(fates, [None, None, None, Some((0, false))]);
}

#[test]
fn on_a_redis_cluster_a_refusal_decides_whatever_another_slots_failure() {
    let Some(mut rig) = Rig::cluster("sharded_refusal_wins") else {
        return;
    };
    let net: &[u8] = b"198.51.100.0/24";
    for _ in 0..2 {
        let (n, _) = from(&mut rig, 7, net);
        rig.run_all();
        assert!(rig.admitted(n));
    }
    // The third: refused (and struck) in the client's slot, while the
    // /24's master times out.
    let (n, answered) = from(&mut rig, 7, net);
    assert_eq!(rig.held.len(), 2);
    rig.run_one();
    let (id, _) = rig.held.pop_front().expect("the /24's call");
    rig.reply(id, None);
    assert_eq!(refused_by(&rig, n, &answered), Some((0, true)));
    assert_eq!(rig.redis_int(&[0, 198, 51, 100, 7], ClientKey::Strikes), 1);
    // Admitted by the client's slot, the other failed: the fallback rule,
    // told Redis struck nothing.
    let (n, _) = from(&mut rig, 8, net);
    rig.run_one();
    let (id, _) = rig.held.pop_front().expect("the /24's call");
    rig.reply(id, None);
    let expected = Fate::FellBack {
        failure: Unavailable::Down,
        sent: false,
    };
    assert_eq!(rig.fate(n), Some(&expected));
}

#[test]
fn on_a_redis_cluster_stacked_limits_of_the_client_are_refused_on_the_node() {
    let Some(mut rig) = Rig::cluster("stacked_cluster") else {
        return;
    };
    let mut limits = Limits::default();
    limits.push(PER_ADDRESS, None).expect("one");
    let hourly = RateLimit {
        requests: 100,
        window_ms: 3_600_000,
    };
    limits.push(hourly, None).expect("two");
    let key: &[u8] = &[0, 203, 0, 113, 9];
    for _ in 0..2 {
        let (n, _) = rig.ask(UNPAID, key, limits, FailPolicy::Local);
        rig.run_all();
        assert!(rig.admitted(n));
    }
    let (n, _) = rig.ask(UNPAID, key, limits, FailPolicy::Local);
    rig.run_all();
    assert!(rig.refused(n), "{:?}", rig.fate(n));
    let (_, answered) = rig.ask(UNPAID, key, limits, FailPolicy::Local);
    assert!(matches!(answered, Answered::Now(_)), "{answered:?}");
}

/// An unpaid request from `198.51.100.<address>` named by its address as
/// the default key writes it (`\0` and the text: what `slot=net` reads).
fn from_address(rig: &mut Rig, address: u8) -> (u32, Answered) {
    let key = format!("\0198.51.100.{address}").into_bytes();
    let keys = [None, Some(&b"198.51.100.0/24"[..])];
    rig.ask_keyed(UNPAID, (&key, &keys), limits(), FailPolicy::Local)
}

#[test]
fn with_slot_net_a_client_and_its_network_are_one_stacked_call_counted_by_both_or_none() {
    let Some(mut rig) = Rig::cluster_net("slot_net_one_call") else {
        return;
    };
    // Each request: one call, the stacked script's, in the /24's slot (the
    // rig checks every key of it is there).
    for address in 1..=3 {
        let (n, _) = from_address(&mut rig, address);
        assert_eq!(held_scripts(&rig), ["stacked"], "one call");
        rig.run_all();
        assert!(rig.admitted(n), "{:?}", rig.fate(n));
    }
    // The fourth address: refused by the /24, counted by neither limit,
    // nobody struck.
    let (n, answered) = from_address(&mut rig, 4);
    assert_eq!(held_scripts(&rig), ["stacked"]);
    rig.run_all();
    assert_eq!(refused_by(&rig, n, &answered), Some((1, false)));
    let fourth = b"\x00198.51.100.4";
    assert_eq!(rig.window(fourth), 0, "counted by both or none");
    assert_eq!(rig.redis_int(fourth, ClientKey::Strikes), 0);
    assert_eq!(rig.window(b"\x00198.51.100.3"), 1, "under the /24's tag");
    // New addresses of the refused /24: refused here, no call.
    let calls = rig.calls_run;
    for address in 5..50 {
        let (n, answered) = from_address(&mut rig, address);
        assert_eq!(refused_by(&rig, n, &answered), Some((1, false)));
    }
    assert_eq!(rig.calls_run, calls);
}

#[test]
fn a_blocked_client_under_two_limits_is_answered_on_the_node_unless_open_and_unreached() {
    let Some(mut rig) = Rig::new("keyed_blocked") else {
        return;
    };
    let blocked = BreakerStatus {
        strikes: 10,
        block: Block::Blocked,
        block_ms: 60_000,
        tripped: None,
    };
    let key = [0, 198, 51, 100, 7];
    let net: &[u8] = b"198.51.100.0/24";
    rig.zone
        .remember(&key, blocked, RULES, rig.now.monotonic_ms);
    #[rustfmt::skip]
    let table = [
        (Reach::Connected, FailPolicy::Open, true),
        (Reach::Connected, FailPolicy::Local, true),
        (Reach::Unknown, FailPolicy::Open, false),
        (Reach::Down, FailPolicy::Open, false),
        (Reach::Down, FailPolicy::Closed, true),
        (Reach::Down, FailPolicy::Local, true),
    ];
    for (i, (reach, fail, here)) in table.into_iter().enumerate() {
        rig.zone.reach = reach;
        let keys = [None, Some(net)];
        let (_, answered) = rig.ask_keyed(UNPAID, (&key, &keys), limits(), fail);
        let is_blocked = matches!(answered, Answered::Now(Reply::Checked(c)) if c.breaker.block == Block::Blocked);
        assert_eq!(is_blocked, here, "row {i}: {answered:?}");
        if here {
            assert!(rig.held.is_empty(), "row {i}: no call");
        }
        rig.held.clear();
    }
}

//! Stacked checks gathered into one call (`stacks.rs`): a lone stacked
//! check goes at once; those that come while one of their slot is on its
//! way go together when its reply comes, each answered its own; a call
//! that times out or comes too late falls each back, counting nothing; a
//! Redis Cluster gathers the parts of several requests per slot.

use super::*;
use crate::cluster::calls::MAX_GATHERED;
use crate::cluster::generation::slot_of_tag;
use crate::cluster::keys::own_tag;
use crate::cluster::node::gather::MAX_HELD;
use crate::limiter::limits::KeyId;
use crate::limiter::Limit;
use crate::redis::clock;
use crate::redis::command::client_tag;

const NET: RateLimit = RateLimit {
    requests: 3,
    window_ms: 60_000,
};

/// Per address (2 a minute, exact), then per /24 (3 a minute, `approx`,
/// `key=$pow_shield_net`).
fn limits() -> Limits {
    let mut limits = Limits::default();
    limits.add(Limit::new(LIMIT)).expect("one");
    let net = Limit::new(NET).approx().keyed(KeyId::of("$pow_shield_net"));
    limits.add(net).expect("two");
    limits
}

const NET_A: &[u8] = b"198.51.100.0/24";
const NET_B: &[u8] = b"203.0.113.0/24";

fn address(net: &[u8], n: u8) -> Vec<u8> {
    let mut key = net[..net.len() - 4].to_vec();
    key.push(n);
    key
}

/// An unpaid request from address `n` of `net`.
fn from(rig: &mut Rig, net: &'static [u8], n: u8) -> (u32, Answered) {
    let key = address(net, n);
    let keys: &'static [Option<&'static [u8]>] = Box::leak(Box::new([None, Some(net)]));
    rig.ask_keyed(UNPAID, (&key, keys), limits(), FailPolicy::Local)
}

/// Whether a held call is a gathered one (the stacked script's `*`).
fn gathered(command: &Command) -> bool {
    matches!(command, Command::Script(c) if c.evalsha.windows(7).any(|w| w == b"$1\r\n*\r\n"))
}

/// How request `n` was decided: admitted, or refused by which limit and
/// whether struck.
fn decided(rig: &Rig, n: u32) -> Option<(bool, u8, bool)> {
    match rig.fate(n) {
        Some(Fate::Answered(Reply::Checked(c))) => {
            Some((c.verdict.allowed, c.verdict.limit, c.struck))
        }
        _ => None,
    }
}

/// The /24's count in Redis (its `approx` counter's current window).
fn net_count(rig: &mut Rig, net: &[u8]) -> i64 {
    let mut name = Vec::new();
    let tag = own_tag(net);
    keys::write(
        &mut name,
        rig.prefix.as_bytes(),
        tag.as_bytes(),
        ClientKey::Approx(NET),
    );
    match rig.redis.call(&[b"HGET", &name, b"c"]) {
        OwnedFrame::BulkString(v) => String::from_utf8_lossy(&v).parse().unwrap_or(-1),
        _ => 0,
    }
}

#[test]
fn stacked_checks_that_come_while_one_is_on_its_way_go_in_one_call_each_answered_its_own() {
    let Some(mut rig) = Rig::new("stacks_gather") else {
        return;
    };
    // Address 9 of the other /24 used its own two.
    for _ in 0..2 {
        from(&mut rig, NET_B, 9);
        rig.run_all();
    }
    let (first, _) = from(&mut rig, NET_A, 1);
    assert_eq!(rig.held.len(), 1, "a lone check goes at once");
    assert!(!gathered(&rig.held[0].1));
    let asked: Vec<u32> = [(NET_A, 2), (NET_A, 3), (NET_A, 4), (NET_B, 9)]
        .into_iter()
        .map(|(net, n)| from(&mut rig, net, n).0)
        .collect();
    assert_eq!(rig.held.len(), 1, "they wait behind the first");
    let calls = rig.calls_run;
    rig.run_one();
    assert_eq!(decided(&rig, first), Some((true, 0, false)));
    assert_eq!(rig.held.len(), 1, "all four in one call");
    assert!(gathered(&rig.held[0].1));
    rig.run_all();
    assert_eq!(rig.calls_run, calls + 2);
    let fates: Vec<_> = asked.iter().map(|&n| decided(&rig, n)).collect();
    // Two more of the /24's three, then its refusal (no strike); address
    // 9 refused by its own limit (struck).
    assert_eq!(
        fates,
        [
            Some((true, 0, false)),
            Some((true, 1, false)),
            Some((false, 1, false)),
            Some((false, 0, true)),
        ]
    );
    assert_eq!(net_count(&mut rig, NET_A), 3);
    assert_eq!(rig.window(&address(NET_A, 4)), 0, "counted by all or none");
    assert_eq!(rig.redis_int(&address(NET_B, 9), ClientKey::Strikes), 1);
    // Redis's refusal of the /24 holds on the node: a new address of it is
    // refused here, without a call.
    let (_, answered) = from(&mut rig, NET_A, 5);
    assert!(matches!(answered, Answered::Now(_)), "{answered:?}");
    assert_eq!(rig.node.in_flight(), 0);
}

#[test]
fn a_gathered_stacked_call_redis_never_answers_falls_each_check_back() {
    let Some(mut rig) = Rig::new("stacks_timeout") else {
        return;
    };
    from(&mut rig, NET_A, 1);
    let (a, _) = from(&mut rig, NET_A, 2);
    let (b, _) = from(&mut rig, NET_B, 3);
    rig.run_one();
    assert!(gathered(&rig.time_out_first()));
    assert_eq!(
        (rig.fate(a), rig.fate(b)),
        (Some(&TIMED_OUT), Some(&TIMED_OUT))
    );
    assert_eq!(rig.node.in_flight(), 0);
    // Nothing is left on its way: the next check goes at once, alone.
    from(&mut rig, NET_A, 4);
    assert_eq!(rig.held.len(), 1);
    assert!(!gathered(&rig.held[0].1));
}

#[test]
fn stacked_checks_waiting_behind_a_call_that_times_out_fall_back_never_sent() {
    let Some(mut rig) = Rig::new("stacks_behind_timeout") else {
        return;
    };
    let (first, _) = from(&mut rig, NET_A, 1);
    let (a, _) = from(&mut rig, NET_A, 2);
    let (b, _) = from(&mut rig, NET_B, 3);
    rig.time_out_first();
    assert!(matches!(
        rig.fate(first),
        Some(Fate::FellBack { sent: true, .. })
    ));
    assert_eq!(
        (rig.fate(a), rig.fate(b)),
        (Some(&NEVER_SENT), Some(&NEVER_SENT))
    );
    assert!(rig.held.is_empty());
    assert_eq!(net_count(&mut rig, NET_A), 0);
}

#[test]
fn a_gathered_stacked_call_redis_runs_after_its_deadline_counts_nothing_for_any() {
    let Some(mut rig) = Rig::new("stacks_late") else {
        return;
    };
    from(&mut rig, NET_A, 1);
    let (a, _) = from(&mut rig, NET_A, 2);
    let (b, _) = from(&mut rig, NET_B, 3);
    rig.run_one();
    let Some((id, Command::Script(call))) = rig.held.pop_front() else {
        panic!("no gathered call");
    };
    let frame = rig.run_late(&call, 1_000);
    assert!(clock::expired_ms(&frame).is_some(), "{frame:?}");
    rig.reply(id, Some(&frame));
    let never_ran = Fate::FellBack {
        failure: Unavailable::Down,
        sent: false,
    };
    assert_eq!(
        (rig.fate(a), rig.fate(b)),
        (Some(&never_ran), Some(&never_ran))
    );
    assert_eq!(net_count(&mut rig, NET_A), 1, "the first's only");
    assert_eq!(net_count(&mut rig, NET_B), 0);
    assert_eq!(rig.window(&address(NET_A, 2)), 0);
}

#[test]
fn checks_under_one_approx_limit_go_in_one_call_each_answered_its_own() {
    let Some(mut rig) = Rig::new("stacks_approx") else {
        return;
    };
    let approx = || {
        let mut limits = Limits::default();
        limits.add(Limit::new(LIMIT).approx()).expect("one");
        limits
    };
    let ask = |rig: &mut Rig, key: &[u8]| rig.ask(UNPAID, key, approx(), FailPolicy::Local).0;
    // C used its two.
    for _ in 0..2 {
        ask(&mut rig, b"c");
        rig.run_all();
    }
    let first = ask(&mut rig, b"first");
    let asked = [
        ask(&mut rig, b"a"),
        ask(&mut rig, b"b"),
        ask(&mut rig, b"c"),
    ];
    assert_eq!(rig.held.len(), 1, "they wait behind the first");
    rig.run_one();
    assert!(rig.admitted(first));
    assert!(gathered(&rig.held[0].1));
    rig.run_all();
    let fates: Vec<_> = asked.iter().map(|&n| decided(&rig, n)).collect();
    assert_eq!(
        fates,
        [
            Some((true, 0, false)),
            Some((true, 0, false)),
            Some((false, 0, true))
        ]
    );
    assert_eq!(rig.redis_int(b"c", ClientKey::Strikes), 1);
    // Redis's refusal of C holds on the node.
    let n = ask(&mut rig, b"c");
    assert!(rig.refused(n) && rig.held.is_empty(), "{:?}", rig.fate(n));
}

#[test]
fn a_redis_cluster_gathers_the_parts_of_several_requests_per_slot() {
    let Some(mut rig) = Rig::cluster("stacks_slots") else {
        return;
    };
    let slot = |key: &[u8]| slot_of_tag(client_tag(key).as_bytes());
    let net_slot = slot_of_tag(own_tag(NET_A).as_bytes());
    // Three addresses of one /24, each in a slot of its own.
    let mut picked: Vec<u8> = Vec::new();
    for n in 1..=255u8 {
        let s = slot(&address(NET_A, n));
        if s != net_slot && picked.iter().all(|&p| slot(&address(NET_A, p)) != s) {
            picked.push(n);
        }
        if picked.len() == 3 {
            break;
        }
    }
    let (mut asked, mut held) = (Vec::new(), Vec::new());
    for &n in &picked {
        asked.push(from(&mut rig, NET_A, n).0);
        held.push(rig.held.len());
    }
    // The first: its two parts at once; the others: their own slot's at
    // once, their /24's behind the first's.
    assert_eq!(held, [2, 3, 4]);
    let calls = rig.calls_run;
    // The first's two calls answered: the /24's other two parts go in one
    // call of the counts script (one count each, no breaker).
    rig.run_one();
    rig.run_one();
    let counts = &crate::cluster::scripts::Scripts::for_mode(true).parts;
    let counts = &counts.as_ref().expect("a Redis Cluster's").counts;
    assert!(
        matches!(rig.held.back(), Some((_, Command::Script(c))) if c.script == counts.text),
        "{:?}",
        rig.held.back()
    );
    rig.run_all();
    assert_eq!(rig.calls_run, calls + 5, "the /24's two parts in one call");
    assert_eq!(rig.sent_in_slot, 5, "each with its slot, the router's");
    assert!(asked.iter().all(|&n| rig.admitted(n)), "{:?}", rig.fates);
    assert_eq!(net_count(&mut rig, NET_A), 3);
    for &n in &picked {
        assert_eq!(rig.window(&address(NET_A, n)), 1);
    }
    // A fourth address: refused by the /24; what its own slot counted is
    // taken back.
    let (n, _) = from(&mut rig, NET_A, 200);
    rig.run_all();
    assert_eq!(decided(&rig, n), Some((false, 1, false)));
    assert_eq!(rig.window(&address(NET_A, 200)), 0);
}

#[test]
fn exact_and_stacked_checks_share_one_cap_beyond_which_a_check_goes_alone() {
    let Some(mut rig) = Rig::new("stacks_cap") else {
        return;
    };
    let half = MAX_HELD / 2;
    // An exact check on its way, and half the cap gathered behind it (full
    // calls go at once).
    rig.unpaid(b"\x00192.0.2.1");
    let exact: Vec<Vec<u8>> = (0..half).map(|i| format!("e{i}").into_bytes()).collect();
    for client in &exact {
        rig.unpaid(client);
    }
    // A stacked check on its way (its gathering is its own), and the other
    // half behind it.
    let mut asked = vec![from(&mut rig, NET_A, 1).0];
    assert!(!gathered(&rig.held.back().expect("sent").1), "a lone one");
    for n in 0..half {
        asked.push(from(&mut rig, NET_A, 2 + n as u8).0);
    }
    let before = rig.held.len();
    assert_eq!(
        rig.held.iter().filter(|(_, c)| gathered(c)).count(),
        half / MAX_GATHERED
    );
    // Both caps share 64: the next of either kind goes alone, at once.
    asked.push(from(&mut rig, NET_A, 200).0);
    assert_eq!(rig.held.len(), before + 1, "sent at once");
    assert!(!gathered(&rig.held.back().expect("sent").1), "alone");
    let (last, _) = rig.unpaid(b"e-last");
    assert_eq!(rig.held.len(), before + 2, "sent at once");
    rig.run_all();
    assert!(rig.admitted(last));
    assert!(exact.iter().all(|c| rig.window(c) == 1));
    assert!(
        asked.iter().all(|&n| decided(&rig, n).is_some()),
        "each answered"
    );
}

/// A request of three parts (the client's, its /24's, the
/// site's), several at once: each part's call counts its own keys.
#[test]
fn a_request_of_three_parts_has_each_part_count_its_own_keys() {
    let Some(mut rig) = Rig::cluster("three_parts") else {
        return;
    };
    const SITE: RateLimit = RateLimit {
        requests: 100,
        window_ms: 60_000,
    };
    let mut limits = Limits::default();
    limits.add(Limit::new(LIMIT)).expect("one");
    let net = Limit::new(NET).approx().keyed(KeyId::of("$pow_shield_net"));
    limits.add(net).expect("two");
    let site = Limit::new(SITE).approx().keyed(KeyId::of("$site"));
    limits.add(site).expect("three");
    let keys: &'static [Option<&'static [u8]>] =
        Box::leak(Box::new([None, Some(NET_A), Some(b"the-site".as_slice())]));
    let mut asked = Vec::new();
    for n in 1..=5u8 {
        let key = address(NET_A, n);
        asked.push(
            rig.ask_keyed(UNPAID, (&key, keys), limits, FailPolicy::Local)
                .0,
        );
    }
    rig.run_all();
    let admitted = asked.iter().filter(|&&n| rig.admitted(n)).count();
    // The /24 admits three; the site counts the admitted only.
    assert_eq!(admitted, 3, "{:?}", rig.fates);
    assert_eq!(net_count(&mut rig, NET_A), 3);
    let mut name = Vec::new();
    let tag = own_tag(b"the-site");
    keys::write(
        &mut name,
        rig.prefix.as_bytes(),
        tag.as_bytes(),
        ClientKey::Approx(SITE),
    );
    let site_count = match rig.redis.call(&[b"HGET", &name, b"c"]) {
        OwnedFrame::BulkString(v) => String::from_utf8_lossy(&v).parse().unwrap_or(-1),
        _ => 0,
    };
    assert_eq!(site_count, 3);
}

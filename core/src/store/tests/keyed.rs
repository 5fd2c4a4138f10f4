//! Limits keyed by their own `key=` values (a network, an AS, the site)
//! beside the client's: who is counted, who refused, who struck.

use super::*;

/// 2 an hour per client, 5 an hour per network (`key=$pow_shield_net`).
fn per_client_and_net<'a>(client: &'a [u8], net: &'a [u8]) -> Subject<'a> {
    let mut limits = Limits::NONE;
    let hour = |requests| RateLimit {
        requests,
        window_ms: 3_600_000,
    };
    limits.push(hour(2), None).unwrap();
    let net_id = Some(crate::limiter::KeyId::of("$pow_shield_net"));
    limits.push_keyed(hour(5), None, net_id).unwrap();
    Subject {
        key: client,
        limits: kept(limits),
        key_values: kept([None, Some(net)]),
        ..subject(FIVE_PER_MINUTE)
    }
}

#[test]
fn a_keyed_limit_counts_every_client_of_its_key_and_refuses_the_sixth() {
    let mut s = MemoryStore::default();
    let clients: Vec<Vec<u8>> = (1..=6)
        .map(|i| format!("10.0.0.{i}").into_bytes())
        .collect();
    for client in &clients[..5] {
        let v = checked(s.ask(OFFENCE, &per_client_and_net(client, b"10.0.0.0"))).verdict;
        assert!(v.allowed, "each address is under its own 2 an hour");
    }
    let sixth = checked(s.ask(OFFENCE, &per_client_and_net(&clients[5], b"10.0.0.0")));
    assert_eq!(
        (sixth.verdict.allowed, sixth.verdict.limit),
        (false, 1),
        "the network's 5 an hour refuse the 6th address"
    );
    assert!(
        !sixth.struck,
        "a network over its limit is priced, no offence"
    );
    assert_eq!(s.strikes(&clients[5]), 0, "not the client's");
    assert_eq!(s.strikes(b"10.0.0.0"), 0, "never the network's");
    // a failed verification is an offence whatever refused it
    let failed = checked(s.ask(FAILED, &per_client_and_net(&clients[5], b"10.0.0.0")));
    assert!(failed.struck);
    assert_eq!(s.strikes(&clients[5]), 1);
    let other = checked(s.ask(OFFENCE, &per_client_and_net(b"10.0.1.1", b"10.0.1.0")));
    assert!(other.verdict.allowed, "a client of another network passes");
}

#[test]
fn a_refusal_by_one_limit_counts_nothing_in_the_others() {
    let mut s = MemoryStore::default();
    let client = per_client_and_net(b"10.0.0.1", b"10.0.0.0");
    s.ask(OFFENCE, &client);
    s.ask(OFFENCE, &client);
    let refused = checked(s.ask(OFFENCE, &client)).verdict;
    assert_eq!((refused.allowed, refused.limit), (false, 0), "its own 2");
    for i in 2..=4 {
        let neighbour = format!("10.0.0.{i}").into_bytes();
        let v = checked(s.ask(OFFENCE, &per_client_and_net(&neighbour, b"10.0.0.0"))).verdict;
        assert!(v.allowed, "the network counted 2 of 5, not the refused one");
    }
}

#[test]
fn an_empty_key_value_leaves_the_request_out_of_that_limit_only() {
    let mut s = MemoryStore::default();
    let outside = per_client_and_net(b"10.0.0.1", b"");
    for _ in 0..2 {
        assert!(checked(s.ask(OFFENCE, &outside)).verdict.allowed);
    }
    let v = checked(s.ask(OFFENCE, &outside)).verdict;
    assert_eq!((v.allowed, v.limit), (false, 0), "still counted per client");
    // the network's bucket was never written
    assert!(s
        .buckets
        .keys()
        .all(|(_, whose, _, _)| *whose != Whose::Own));
}

#[test]
fn only_an_unpaid_refusal_by_the_clients_own_limit_is_an_offence() {
    for (offence, by_own_limit, is) in [
        (Offence::Unpaid, true, Offence::Unpaid),
        (Offence::Unpaid, false, Offence::None),
        (Offence::Failed, true, Offence::Failed),
        (Offence::Failed, false, Offence::Failed),
        (Offence::None, true, Offence::None),
        (Offence::None, false, Offence::None),
    ] {
        assert_eq!(
            offence.refused(by_own_limit),
            is,
            "{offence:?} {by_own_limit}"
        );
    }
}

#[test]
fn a_client_waiting_out_a_networks_refusals_is_never_blocked() {
    // Another client of the /24 takes the network's slots each time; the
    // victim asks once per window, over and over: never struck.
    let mut s = MemoryStore::default();
    let victim = per_client_and_net(b"10.0.0.2", b"10.0.0.0");
    let mut at = 0;
    for _ in 0..10 {
        s.at(at);
        for other in 10..15 {
            let other = format!("10.0.0.{other}").into_bytes();
            s.ask(PAID, &per_client_and_net(&other, b"10.0.0.0"));
        }
        let c = checked(s.ask(OFFENCE, &victim));
        assert!(!c.verdict.allowed && !c.struck);
        assert_eq!(c.breaker.block, Block::Clear);
        at += 3_600_000;
    }
    assert_eq!(s.strikes(b"10.0.0.2"), 0);
}

#[test]
fn an_empty_key_value_leaves_its_limit_out_of_the_counted_ones_and_no_other() {
    let net = b"10.0.0.0";
    for (values, expected) in [
        (
            [None, Some(&net[..])],
            vec![(0, Counted::Client(KEY)), (1, Counted::Own(net))],
        ),
        ([None, Some(&b""[..])], vec![(0, Counted::Client(KEY))]),
        (
            [Some(&b""[..]), Some(&net[..])],
            vec![(1, Counted::Own(net))],
        ),
        ([Some(&b""[..]), Some(&b""[..])], vec![]),
    ] {
        let s = Subject {
            key: KEY,
            key_values: kept(values),
            ..per_client_and_net(KEY, net)
        };
        let each: Vec<_> = s.counted_iter().map(|(at, _, whose)| (at, whose)).collect();
        assert_eq!(each, expected, "{values:?}");
        let (list, n) = s.counted_limits();
        let listed: Vec<_> = list[..n]
            .iter()
            .map(|&(at, _, whose)| (at, whose))
            .collect();
        assert_eq!(listed, expected, "{values:?}: the list as the iterator");
        let rates: Vec<_> = s.counted_iter().map(|(at, rate, _)| (at, rate)).collect();
        let written = s.limits.as_slice();
        assert!(
            rates.iter().all(|&(at, rate)| rate == written[at].rate),
            "{values:?}"
        );
    }
}

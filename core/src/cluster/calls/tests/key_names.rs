//! A stacked call's keys, written from their words made once with the
//! tags left out (`KeysText`), are the names the key layout writes, each
//! under its count's tag, in a well-formed call.

use super::words;
use crate::cluster::calls::{Calls, Part};
use crate::cluster::keys::{self, ClientKey};
use crate::cluster::scripts::replies::StackedLimits;
use crate::limiter::breaker::BreakerRules;
use crate::limiter::{KeyId, Limit, Limits, RateLimit};
use crate::redis::cluster::ClientSlot;
use crate::redis::command::encode;
use crate::store::{Counted, Offence, Subject};

fn rate(requests: u32, window_ms: u64) -> RateLimit {
    RateLimit {
        requests,
        window_ms,
    }
}

/// The names of `part`'s keys as the key layout writes them: its
/// breaker's under its route, then each count's and its refusals' under
/// the client's tag or the `key=` value's own.
fn names(prefix: &[u8], part: &Part, subject: &Subject) -> Vec<String> {
    let route = part.route.as_bytes();
    let name = |tag: &[u8], which| {
        let mut w = Vec::new();
        keys::write(&mut w, prefix, tag, which);
        String::from_utf8(w).unwrap()
    };
    let mut out: Vec<String> = [ClientKey::Strikes, ClientKey::Trips, ClientKey::Unpaid]
        .into_iter()
        .map(|which| name(route, which))
        .collect();
    for i in 0..part.limits_len() {
        let at = usize::from(part.at[i]);
        let tag = match subject.counted(at).unwrap() {
            Counted::Own(value) => keys::own_tag(value).into_bytes(),
            Counted::Client(_) | Counted::Spends(_) => route.to_vec(),
        };
        let limit = part.rate(i).unwrap();
        let count = match subject.limits.approx(at) {
            true => ClientKey::Approx(limit),
            false => ClientKey::Window(limit),
        };
        out.push(name(&tag, count));
        out.push(name(&tag, ClientKey::Refused(limit)));
    }
    out
}

/// `call`'s words from its 4th, after checking it encodes as its words do
/// (every header the length of its word).
fn keys_of(call: &[u8], n: usize) -> Vec<String> {
    let w = words(call);
    let mut again = Vec::new();
    encode(
        &mut again,
        &w.iter().map(|w| w.as_bytes()).collect::<Vec<_>>(),
    );
    assert_eq!(again, call, "a well-formed call");
    w[3..3 + n].to_vec()
}

#[test]
fn a_stacked_calls_keys_are_the_names_the_key_layout_writes() {
    let net = KeyId::of("$pow_shield_net");
    let site = KeyId::of("$site");
    let mut sets = Vec::new();
    let mut one = Limits::NONE;
    one.add(Limit::new(rate(5, 60_000))).unwrap();
    sets.push((one, vec![None]));
    let mut two = one;
    two.add(Limit::new(rate(1_000_000, 1_000)).keyed(net))
        .unwrap();
    sets.push((two, vec![None, Some(&b"203.0.113.0/24"[..])]));
    let mut net_first = Limits::NONE;
    net_first
        .add(Limit::new(rate(600, 1_000)).keyed(net))
        .unwrap();
    net_first.add(Limit::new(rate(7, 1_000)).approx()).unwrap();
    sets.push((net_first, vec![Some(b"2001:db8:1::/48"), None]));
    let mut three = two;
    three
        .add(Limit::new(rate(9, 3_600_000)).keyed(site).approx())
        .unwrap();
    sets.push((
        three,
        vec![None, Some(b"203.0.113.0/24"), Some(b"site a{b}")],
    ));
    // A `key=` value come out empty: left out.
    sets.push((three, vec![None, Some(b""), Some(&[b'x'; 90][..])]));
    let long_key = [b'k'; 100];
    let clients: [&[u8]; 6] = [
        b"\x00203.0.113.7",
        b"\x001.2.3.4",
        b"\x002001:db8:1:2::/64",
        b"\x00unix:",
        b"site-key{%}",
        &long_key,
    ];
    let long_prefix = "p".repeat(60);
    for prefix in ["", "ps:", &long_prefix] {
        for (cluster, slot) in [
            (false, ClientSlot::Own),
            (true, ClientSlot::Own),
            (true, ClientSlot::Net),
        ] {
            let calls = Calls::new(prefix, 1, 1, cluster).with_client_slot(slot);
            for (limits, values) in &sets {
                for key in clients {
                    let subject = Subject {
                        key,
                        limits,
                        key_values: values,
                        rules: BreakerRules::default(),
                        rising: false,
                    };
                    let tag = calls.tag(key);
                    let mut parts = calls.parts(&tag, &subject, Offence::Unpaid);
                    parts.push(calls.whole(&tag, &subject, Offence::Unpaid));
                    for part in &parts {
                        let expected = names(prefix.as_bytes(), part, &subject);
                        let n = expected.len();
                        let call = calls.stacked(part, 7);
                        assert_eq!(keys_of(&call.evalsha, n), expected, "{prefix} {key:?}");
                        let both = calls.stacks(&[(part, 7), (part, 8)]);
                        let twice = [expected.clone(), expected].concat();
                        assert_eq!(keys_of(&both.evalsha, 2 * n), twice, "{prefix} {key:?}");
                    }
                }
            }
        }
    }
}

//! The Redis key layout (docs/operations.md, "Sizing Redis"): every key of
//! a client shares its hash tag, `<prefix>{<tag>}`, so that one script call
//! touches one Redis Cluster slot; the tag is the client key, readable
//! (`command::client_tag`): the default key of `203.0.113.7` is
//! `@203.0.113.7`, a `pow_shield_key` value its printable ASCII with
//! `{}%#@*?[]\"'`, space and other bytes as `%xx`, a long one `#` and the
//! base64url of its SHA-256.
//!
//! | key | holds |
//! |---|---|
//! | `<prefix>{<tag>}:w:<n>:<ms>` | the sliding-window log of limit n/ms (a limit's `key=` value: its own tag, `own_tag`) |
//! | `<prefix>{<tag>}:a:<n>:<ms>` | the approximate counter of limit n/ms |
//! | `<prefix>{<tag>}:o:<n>:<ms>` | refusals in the window (rising difficulty) |
//! | `<prefix>{<tag>}:s`, `:t`, `:u` | strikes, breaker trips, unpaid strikes |
//! | `<prefix>{<tag>}:c` | spends waiting for their 429's strike (in a batch on its way) |
//! | `<prefix>{<tag>}:n:<worker>` | the run and total of local refusals Redis applied from one worker |
//! | `<prefix>spent:{<sha256>}` | a spent token (one Redis) |
//! | `<prefix>{<tag>}:p:<sha256>` | a spent token (Redis Cluster: the client's slot) |

use std::net::IpAddr;

use crate::limiter::client::{client_net, DEFAULT_KEY_MARK, OWN_KEY};
use crate::limiter::RateLimit;
use crate::redis::cluster::ClientSlot;
use crate::redis::command::{client_tag, Tag, MAX_READABLE_TAG};
use crate::redis::script_call::digits_before;

/// One of a client's keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientKey<'a> {
    /// The exact sliding-window log.
    Window(RateLimit),
    /// The approximate counter (`pow_shield_limit ... approx`).
    Approx(RateLimit),
    /// Requests refused in about the last window.
    Refused(RateLimit),
    Strikes,
    Trips,
    /// Of the strikes, those a spend may take back (unpaid 429s).
    Unpaid,
    /// A spent token, in the client's slot (Redis Cluster).
    Spent(&'a [u8; 32]),
    /// The run and running total of local refusals applied from the
    /// worker with this id (a call resent after a lost reply adds
    /// nothing twice).
    Batches(u64),
    /// Spends that found no unpaid strike to take back yet (the 429's
    /// strike is in a node's batch still on its way).
    Paid,
}

/// The hash tag of `key`'s keys: `<prefix>{<tag>}`.
pub fn client_prefix(prefix: &str, key: &[u8]) -> String {
    format!("{prefix}{{{}}}", client_tag(key))
}

/// The hash tag of a `key=` value's counts (`pow_shield_limit ...
/// key=`): apart from every client's, as the zone keeps them.
pub fn own_tag(value: &[u8]) -> String {
    crate::redis::command::tag_of(&[OWN_KEY, value])
}

/// The tag of client `key`'s keys, `<prefix>{<tag>}` (`Tag::of(key)`,
/// `command::client_tag`'s spelling); with `slot=net`, a default key's (an
/// address's) is its network's own tag (`key=$pow_shield_net`'s), `}{`,
/// then its own: `@key=203.0.113.0/24}{@203.0.113.7`, so its keys
/// (`pow:{@key=203.0.113.0/24}{@203.0.113.7}:w:60:60000`) share the slot
/// of the /24's. Other keys (`pow_shield_key` values) keep their own.
pub fn client_tag_in(key: &[u8], slot: ClientSlot) -> Tag {
    if slot == ClientSlot::Own {
        return Tag::of(key);
    }
    let Some(id) = key.strip_prefix(&[DEFAULT_KEY_MARK]) else {
        return Tag::of(key);
    };
    // An IPv4 address (every request of one): its /24's tag and its own
    // written as they are, all readable (measured: spelled byte by byte,
    // some 600 instructions a request).
    if let Some(tag) = ipv4_net_tag(id) {
        return tag;
    }
    if let Some(last) = ipv4_last_dot(id) {
        return Tag::of_bytes(&[b"@key=", &id[..=last], b"0/24}{@", id]);
    }
    let peer = match id {
        b"unix:" => None,
        _ => match core::str::from_utf8(id)
            .ok()
            .and_then(|id| id.strip_suffix("/64"))
        {
            Some(text) => match text.parse() {
                Ok(v6) => Some(IpAddr::V6(v6)),
                Err(_) => return Tag::of(key),
            },
            None => return Tag::of(key),
        },
    };
    let net = Tag::of_parts(&[OWN_KEY, client_net(peer).as_str().as_bytes()]);
    Tag::in_slot_of(&net, &Tag::of(key))
}

/// Whether a `key=` value's counts (own tag `@key=<value>`) are known to
/// lie in the slot of the client whose tag is `tag`, without hashing: the
/// client's tag starts with the value's own and `}{` (`slot=net`, the
/// value its network). (No client tag but such a one holds `}{`, and a
/// network's text needs no escape: the value is that network.)
pub fn in_client_slot(tag: &[u8], value: &[u8]) -> bool {
    let Some(rest) = tag.strip_prefix(b"@key=".as_slice()) else {
        return false;
    };
    rest.strip_prefix(value)
        .is_some_and(|rest| rest.starts_with(b"}{"))
}

/// `client_tag_in`'s `slot=net` tag of `id`, an IPv4 address of at most
/// 16 bytes (`None`: another), `@key=<a.b.c.>0/24}{@<a.b.c.d>`, in
/// fixed-size copies: the address taken into 16 bytes, then copied whole
/// twice (measured: in four `memcpy` calls of a tag made of parts, some
/// 110 instructions a request more; its bytes taken one at a time as its
/// dots were counted, 40 more).
fn ipv4_net_tag(id: &[u8]) -> Option<Tag> {
    let last = ipv4_last_dot(id)?;
    let mut ip = [0u8; 16];
    ip.get_mut(..id.len())?.copy_from_slice(id);
    let mut tag = [0u8; MAX_READABLE_TAG];
    tag[..5].copy_from_slice(b"@key=");
    tag[5..21].copy_from_slice(&ip);
    let at = 5 + last + 1;
    tag.get_mut(at..at + 8)?.copy_from_slice(b"0/24}{@\0");
    let at = at + 7;
    tag.get_mut(at..at + 16)?.copy_from_slice(&ip);
    Tag::of_inline(tag, at + id.len())
}

/// Where the last dot of `id` is, if it is an IPv4 address as
/// `client::client_id` writes it (four decimals and three dots).
pub(crate) fn ipv4_last_dot(id: &[u8]) -> Option<usize> {
    let (mut dots, mut last) = (0, 0);
    for (at, &b) in id.iter().enumerate() {
        match b {
            b'.' => (dots, last) = (dots + 1, at),
            b'0'..=b'9' => {}
            _ => return None,
        }
    }
    (dots == 3).then_some(last)
}

/// Writes the full name of one of a client's keys; `tag` is
/// `client_tag(key)` (computed once per request).
pub fn write(w: &mut Vec<u8>, prefix: &[u8], tag: &[u8], which: ClientKey) {
    w.extend_from_slice(prefix);
    w.push(b'{');
    w.extend_from_slice(tag);
    w.push(b'}');
    let mut room = [0u8; LIMIT_TAIL];
    if let Some(tail) = tail(which, &mut room) {
        w.extend_from_slice(tail);
        return;
    }
    match which {
        ClientKey::Spent(digest) => {
            w.extend_from_slice(b":p:");
            w.extend_from_slice(hex::encode(digest).as_bytes());
        }
        ClientKey::Batches(worker) => {
            w.extend_from_slice(b":n:");
            w.extend_from_slice(format!("{worker:x}").as_bytes());
        }
        _ => {}
    }
}

/// The letter of a limit's refusals key (`:o:`): its other keys' names
/// but for that letter.
pub const REFUSED: u8 = b'o';

/// The breaker's keys as every script takes them: the strikes' tail
/// (`:s`), then the letters of the trips' and the unpaid strikes' (`:t`,
/// `:u`), names that differ from the strikes' in no more.
pub const BREAKER: (&[u8], &[u8]) = (b":s", b"tu");

/// What follows `<prefix>{<tag>}` in the name of a key of a limit or of
/// the breaker, made in `room` (`None`: a spent token's, a worker's
/// batches', longer: [`write`] makes them).
pub fn tail<'a>(which: ClientKey, room: &'a mut [u8; LIMIT_TAIL]) -> Option<&'a [u8]> {
    let (suffix, limit): (&[u8; 3], _) = match which {
        ClientKey::Window(limit) => (b":w:", limit),
        ClientKey::Approx(limit) => (b":a:", limit),
        ClientKey::Refused(limit) => (&[b':', REFUSED, b':'], limit),
        ClientKey::Strikes => return Some(BREAKER.0),
        ClientKey::Trips => return Some(b":t".as_slice()),
        ClientKey::Unpaid => return Some(b":u".as_slice()),
        ClientKey::Paid => return Some(b":c".as_slice()),
        ClientKey::Spent(_) | ClientKey::Batches(_) => return None,
    };
    // `<suffix><requests>:<window_ms>` made right to left on the stack and
    // copied once (measured: a copy a part, some 60 instructions a key).
    let at = digits_before(room, LIMIT_TAIL, limit.window_ms);
    room[at - 1] = b':';
    let at = digits_before(room, at - 1, limit.requests.into()) - 3;
    room[at..at + 3].copy_from_slice(suffix);
    Some(&room[at..])
}

/// The longest end of a limit's key: `:w:`, a `u32`, `:` and a `u64`.
pub const LIMIT_TAIL: usize = 3 + 10 + 1 + 20;

/// A spent token's key. One Redis: keyed by the token alone, so a token is
/// spent once whoever spends it. A Redis Cluster: in the slot of the client
/// that spends it (the spend script takes back that client's strike in the
/// same call), so a token bound to one address is spent once per client key
/// of that address; `tag` is the client's (`client_tag_in`).
pub fn spent(prefix: &str, digest: &[u8; 32], tag: &[u8], cluster: bool) -> String {
    if cluster {
        let mut w = Vec::new();
        write(&mut w, prefix.as_bytes(), tag, ClientKey::Spent(digest));
        String::from_utf8_lossy(&w).into_owned()
    } else {
        format!("{prefix}spent:{{{}}}", hex::encode(digest))
    }
}

/// The `EX` seconds of a spent record written later (a replay after an
/// outage): the time left, rounded up, at least 1 (Redis refuses 0).
pub fn spent_ttl_s(expires_at_ms: u64, now_ms: u64) -> u64 {
    expires_at_ms.saturating_sub(now_ms).div_ceil(1000).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv4_addresss_net_tag_is_its_parts_one_after_the_other() {
        let digits = ["1.2.3.4", "255.255.255.255", "10.0.0.1", "0001.2.3.4444444"];
        let others = [
            "1.2.3",
            "1.2.3.4.5",
            "a.b.c.d",
            "1.2.3.",
            "",
            "00001.2.3.4444444",
        ];
        for id in digits.iter().chain(&others).map(|id| id.as_bytes()) {
            let parts = ipv4_last_dot(id)
                .map(|last| Tag::of_bytes(&[b"@key=", &id[..=last], b"0/24}{@", id]));
            let whole = ipv4_net_tag(id);
            assert!(whole.is_none() || whole == parts, "{id:?}");
            assert_eq!(whole.is_some(), id.len() <= 16 && parts.is_some(), "{id:?}");
        }
    }

    const LIMIT: RateLimit = RateLimit {
        requests: 60,
        window_ms: 60_000,
    };

    fn name(which: ClientKey) -> String {
        let mut w = Vec::new();
        write(
            &mut w,
            b"pow:",
            client_tag(b"203.0.113.7").as_bytes(),
            which,
        );
        String::from_utf8(w).unwrap()
    }

    #[test]
    fn a_clients_keys_share_its_hash_tag() {
        let tag = "pow:{203.0.113.7}";
        assert_eq!(client_prefix("pow:", b"203.0.113.7"), tag);
        assert_eq!(
            client_prefix("pow:", b"\x00203.0.113.7"),
            "pow:{@203.0.113.7}"
        );
        assert_eq!(client_prefix("pow:", b"{a}"), "pow:{%7ba%7d}");
        assert_eq!(name(ClientKey::Window(LIMIT)), format!("{tag}:w:60:60000"));
        assert_eq!(name(ClientKey::Approx(LIMIT)), format!("{tag}:a:60:60000"));
        assert_eq!(name(ClientKey::Refused(LIMIT)), format!("{tag}:o:60:60000"));
        assert_eq!(name(ClientKey::Strikes), format!("{tag}:s"));
        assert_eq!(name(ClientKey::Trips), format!("{tag}:t"));
        assert_eq!(name(ClientKey::Unpaid), format!("{tag}:u"));
        assert_eq!(name(ClientKey::Batches(0xab12)), format!("{tag}:n:ab12"));
        assert_eq!(
            name(ClientKey::Spent(&[0xab; 32])),
            format!("{tag}:p:{}", "ab".repeat(32))
        );
    }

    #[test]
    fn a_limits_key_ends_with_its_numbers_in_decimal_whatever_their_length() {
        let tag = "pow:{203.0.113.7}";
        for (requests, window_ms) in [
            (0, 0),
            (9, 10),
            (10, 99),
            (100_000, 2_000),
            (u32::MAX, u64::MAX),
        ] {
            let limit = RateLimit {
                requests,
                window_ms,
            };
            let end = format!("{requests}:{window_ms}");
            assert_eq!(name(ClientKey::Window(limit)), format!("{tag}:w:{end}"));
            assert_eq!(name(ClientKey::Approx(limit)), format!("{tag}:a:{end}"));
            assert_eq!(name(ClientKey::Refused(limit)), format!("{tag}:o:{end}"));
        }
    }

    #[test]
    fn a_keys_tail_is_what_write_puts_after_its_tag() {
        let limit = RateLimit {
            requests: 7,
            window_ms: 1_000,
        };
        let kinds = [
            ClientKey::Window(limit),
            ClientKey::Approx(LIMIT),
            ClientKey::Refused(limit),
            ClientKey::Strikes,
            ClientKey::Trips,
            ClientKey::Unpaid,
            ClientKey::Paid,
        ];
        for which in kinds {
            let mut room = [0u8; LIMIT_TAIL];
            let tail = tail(which, &mut room).map(<[u8]>::to_vec);
            let end = name(which).replacen("pow:{203.0.113.7}", "", 1);
            assert_eq!(tail, Some(end.into_bytes()));
        }
        let mut room = [0u8; LIMIT_TAIL];
        assert_eq!(tail(ClientKey::Batches(1), &mut room), None);
        assert_eq!(tail(ClientKey::Spent(&[0; 32]), &mut room), None);
    }

    #[test]
    fn a_key_values_tag_is_the_tag_of_own_key_and_the_value() {
        let long = vec![b'v'; 100];
        for value in [&b"203.0.113.0/24"[..], b"", b"{x}", b"\x00a b", &long] {
            let whole = [OWN_KEY, value].concat();
            assert_eq!(own_tag(value), client_tag(&whole));
        }
        assert!(own_tag(&long).starts_with('#'));
    }

    #[test]
    fn a_spent_key_is_the_tokens_alone_except_in_a_redis_cluster() {
        let d = [1u8; 32];
        assert_eq!(
            spent("pow:", &d, b"k", false),
            format!("pow:spent:{{{}}}", "01".repeat(32))
        );
        assert_eq!(
            spent("pow:", &d, b"k", true),
            format!("pow:{{k}}:p:{}", "01".repeat(32))
        );
    }

    #[test]
    fn with_slot_net_a_clients_network_is_known_in_its_slot_and_nothing_else() {
        use crate::limiter::client::{client_id, client_net};
        use crate::redis::cluster::route_slot;
        let peers = PEERS.iter().map(|p| Some(p.parse::<IpAddr>().unwrap()));
        for peer in peers.chain([None]) {
            let key = [&[DEFAULT_KEY_MARK], client_id(peer).as_str().as_bytes()].concat();
            let net = client_net(peer);
            let net = net.as_str().as_bytes();
            let tag = client_tag_in(&key, ClientSlot::Net);
            assert!(in_client_slot(&tag, net), "{peer:?}");
            assert_eq!(route_slot(&tag), route_slot(own_tag(net).as_bytes()));
            // Its own layout, a prefix of the network, another network,
            // the address itself: not known (hashed, or apart).
            let own = client_tag_in(&key, ClientSlot::Own);
            assert!(!in_client_slot(&own, net), "{peer:?}");
            assert!(!in_client_slot(&tag, &net[..net.len() - 1]), "{peer:?}");
            assert!(!in_client_slot(&tag, b"198.18.0.0/24"), "{peer:?}");
            // (`unix:` is its own network.)
            assert_eq!(
                in_client_slot(&tag, &key[1..]),
                net == &key[1..],
                "{peer:?}"
            );
        }
        assert!(!in_client_slot(b"@key=site", b"site"), "a value's own tag");
    }

    /// Addresses at the edges of their text (`client_id`'s) and their
    /// networks' (`client_net`'s).
    const PEERS: [&str; 9] = [
        "203.0.113.7",
        "0.0.0.0",
        "255.255.255.255",
        "10.1.2.30",
        "::ffff:198.51.100.9",
        "2001:db8:1:2:aaaa::1",
        "::1",
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        "2001:db8::",
    ];

    #[test]
    fn with_slot_net_an_address_keys_start_with_its_networks_tag() {
        use crate::limiter::client::{client_id, client_net};
        use crate::redis::cluster::{key_slot, route_slot};
        let peers = PEERS.iter().map(|p| Some(p.parse::<IpAddr>().unwrap()));
        for peer in peers.chain([None]) {
            let key = [&[DEFAULT_KEY_MARK], client_id(peer).as_str().as_bytes()].concat();
            let net = own_tag(client_net(peer).as_str().as_bytes());
            let tag = client_tag_in(&key, ClientSlot::Net);
            let want = format!("{net}}}{{{}", client_tag(&key));
            assert_eq!(tag.text(), want, "{peer:?}");
            // Redis hashes the network's part of every key of the client,
            // and the node routes its tag there.
            let mut name = Vec::new();
            write(&mut name, b"pow:", &tag, ClientKey::Window(LIMIT));
            assert_eq!(key_slot(&name), key_slot(format!("{{{net}}}").as_bytes()));
            assert_eq!(route_slot(&tag), key_slot(&name), "{peer:?}");
            // Its own layout: its own tag.
            assert_eq!(
                client_tag_in(&key, ClientSlot::Own).text(),
                client_tag(&key)
            );
        }
        let ipv4 = client_tag_in(b"\x00203.0.113.7", ClientSlot::Net);
        assert_eq!(ipv4.text(), "@key=203.0.113.0/24}{@203.0.113.7");
    }

    #[test]
    fn with_slot_net_other_keys_keep_their_own_tag() {
        let long = [b'7'; 100];
        // (A dry run's key: `admin::DRY_RUN` and the client's.)
        let dry = [&b"\x00dry\x00"[..], b"\x00203.0.113.7"].concat();
        for key in [
            &b"203.0.113.7"[..],
            b"api-key-1",
            b"\x00key=203.0.113.0/24",
            b"\x001.2.3",
            b"\x001.2.3.4.5",
            b"\x002001:db8::/48",
            b"\x00unix",
            b"\x00",
            b"",
            &dry,
            &long,
        ] {
            assert_eq!(
                client_tag_in(key, ClientSlot::Net).text(),
                client_tag(key),
                "{}",
                String::from_utf8_lossy(key)
            );
        }
    }

    #[test]
    fn with_slot_net_a_clients_limit_and_its_networks_are_one_part_of_a_stacked_check() {
        use crate::cluster::calls::Calls;
        use crate::limiter::{KeyId, Limit, Limits};
        use crate::store::{Offence, Subject};
        let mut limits = Limits::NONE;
        limits.add(Limit::new(LIMIT)).unwrap();
        let net = RateLimit {
            requests: 600,
            ..LIMIT
        };
        limits
            .add(Limit::new(net).keyed(KeyId::of("$pow_shield_net")))
            .unwrap();
        let key_values: &[Option<&[u8]>] = &[None, Some(b"203.0.113.0/24")];
        let key = b"\x00203.0.113.7";
        let subject = Subject {
            key,
            limits: &limits,
            key_values,
            rules: Default::default(),
            rising: false,
        };
        for (slot, parts) in [(ClientSlot::Own, 2), (ClientSlot::Net, 1)] {
            let calls = Calls::new("pow:", 1, 1, true).with_client_slot(slot);
            let tag = calls.tag(key);
            let made = calls.parts(&tag, &subject, Offence::Unpaid);
            assert_eq!(made.len(), parts, "{slot:?}");
        }
        // One Redis has no slots: a client's own tag.
        let one = Calls::new("pow:", 1, 1, false).with_client_slot(ClientSlot::Net);
        assert_eq!(one.tag(key).text(), "@203.0.113.7");
    }

    /// The keys of a script call (`EVALSHA <sha> <numkeys> <key>...`).
    fn keys_of(call: &crate::cluster::calls::Call) -> Vec<String> {
        let text = String::from_utf8_lossy(&call.evalsha).into_owned();
        let words: Vec<&str> = text.split("\r\n").collect();
        let n: usize = words[6].parse().unwrap();
        (0..n).map(|i| words[8 + 2 * i].to_owned()).collect()
    }

    #[test]
    fn with_slot_net_every_key_of_a_clients_calls_is_in_its_networks_slot() {
        use crate::cluster::calls::{BatchOf, Calls};
        use crate::cluster::refusals::Sending;
        use crate::limiter::{Limit, Limits};
        use crate::redis::cluster::{key_slot, route_slot};
        use crate::store::{Offence, Solution, Subject};
        let calls = Calls::new("pow:", 1, 1, true).with_client_slot(ClientSlot::Net);
        let mut limits = Limits::NONE;
        limits.add(Limit::new(LIMIT)).unwrap();
        for key in [
            &b"\x00203.0.113.7"[..],
            b"\x002001:db8:1:2::/64",
            b"\x00unix:",
        ] {
            let tag = calls.tag(key);
            // As Redis Cluster hashes `pow:{@key=<net>}:...`, the /24's.
            let net =
                key_slot(format!("pow:{{{}}}:w", tag.text().split('}').next().unwrap()).as_bytes());
            assert_eq!(route_slot(&tag), net);
            let subject = Subject {
                key,
                limits: &limits,
                key_values: &[None],
                rules: Default::default(),
                rising: false,
            };
            let solution = Solution {
                digest: [7; 32],
                spent_until_ms: 2_000,
                generation: Some(5),
                forgive: true,
                retry_at_ms: None,
            };
            let spent = calls.spent_key(&solution.digest, key);
            let sending = Sending {
                run: 1,
                total: 1,
                base: 0,
            };
            let of = [BatchOf {
                tag: &tag,
                limit: LIMIT,
                rules: Default::default(),
                sending,
            }];
            for call in [
                calls.check(&tag, &subject, Offence::Unpaid, 1, 1),
                calls.strike(&tag, Default::default()),
                calls.spend(&spent, &tag, &solution, Default::default(), Some(5), 1_000),
                calls.replay(&spent, &tag, 1_000),
                calls.batch(&of),
            ] {
                for k in keys_of(&call) {
                    assert_eq!(key_slot(k.as_bytes()), net, "{k}");
                }
            }
        }
    }

    #[test]
    fn a_late_spent_record_lives_the_time_left_rounded_up_at_least_1_s() {
        assert_eq!(spent_ttl_s(10_001, 0), 11);
        assert_eq!(spent_ttl_s(10_000, 0), 10);
        assert_eq!(spent_ttl_s(5, 10), 1);
    }

    #[test]
    fn the_breakers_keys_differ_from_the_strikes_key_in_their_letter_alone() {
        let mut room = [0u8; LIMIT_TAIL];
        let (strikes, letters) = BREAKER;
        assert_eq!(tail(ClientKey::Strikes, &mut room), Some(strikes));
        for (which, letter) in [ClientKey::Trips, ClientKey::Unpaid]
            .into_iter()
            .zip(letters)
        {
            let mut name = strikes.to_vec();
            name[1] = *letter;
            assert_eq!(tail(which, &mut room), Some(name.as_slice()));
        }
    }
}

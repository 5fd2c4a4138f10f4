//! A stacked call's counts ([`Counts`]), inline: a request has at most
//! [`MAX_LIMITS`] limits, and a tag at most `MAX_READABLE_TAG` bytes
//! (measured: a part's list and a `key=` value's tag were an allocation
//! each, two parts a request of a Redis Cluster).

use crate::cluster::keys::{self, ClientKey};
use crate::limiter::client::OWN_KEY;
use crate::limiter::{RateLimit, MAX_LIMITS};
use crate::redis::command::Tag;

/// Which hash tag a count's keys take, the client's or its `key=`
/// value's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TagOf {
    /// The part's route (the usual case: no copy).
    Route,
    /// The route's first `n` bytes: a `slot=net` client's network, whose
    /// tag its tag starts with (`@key=<net>`, before `}{`,
    /// `keys::in_client_slot`; measured: made anew, some 300 instructions
    /// a request).
    RouteHead(u8),
    /// The `n`th of its [`Counts`]' other tags (from 1).
    Other(u8),
}

/// One limit's count in a stacked call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Count {
    /// Its hash tag.
    pub(super) tag: TagOf,
    pub(super) limit: RateLimit,
    /// A counter (`approx`), else a log.
    pub(super) approx: bool,
    /// Counted per client key (its refusal may strike).
    pub(super) own: bool,
    /// Its limit counts per its `key=` in the location's list.
    pub(super) keyed: bool,
}

/// A part's counts, inline (a request has at most [`MAX_LIMITS`]), and
/// the tags of those not under the route's (the first inline too: one
/// Redis's stacked call of a client and one `key=` value).
#[derive(Clone, Debug)]
pub(super) struct Counts {
    len: u8,
    each: [Count; MAX_LIMITS],
    first_tag: Option<Tag>,
    more_tags: Vec<Tag>,
}

impl Counts {
    /// No count yet.
    pub(super) fn new() -> Counts {
        let none = Count {
            tag: TagOf::Route,
            limit: RateLimit {
                requests: 0,
                window_ms: 0,
            },
            approx: false,
            own: false,
            keyed: false,
        };
        Counts {
            len: 0,
            each: [none; MAX_LIMITS],
            first_tag: None,
            more_tags: Vec::new(),
        }
    }

    /// No count any more (a part made again in place, `Calls::whole_in`):
    /// the counts past `len` are never read, and the list of more tags
    /// keeps its room.
    pub(super) fn clear(&mut self) {
        self.len = 0;
        self.first_tag = None;
        self.more_tags.clear();
    }

    pub(super) fn as_slice(&self) -> &[Count] {
        self.each.get(..usize::from(self.len)).unwrap_or(&[])
    }

    pub(super) fn len(&self) -> usize {
        usize::from(self.len)
    }

    pub(super) fn get(&self, i: usize) -> Option<&Count> {
        self.as_slice().get(i)
    }

    pub(super) fn first(&self) -> Option<&Count> {
        self.as_slice().first()
    }

    pub(super) fn iter(&self) -> core::slice::Iter<'_, Count> {
        self.as_slice().iter()
    }

    /// Adds `count`, under `tag` if given (else the one it names, the
    /// route's or a part of it); none beyond [`MAX_LIMITS`] (a request has
    /// no more limits).
    pub(super) fn push(&mut self, mut count: Count, tag: Option<Tag>) {
        let Some(place) = self.each.get_mut(usize::from(self.len)) else {
            return;
        };
        match tag {
            None => {}
            Some(tag) if self.first_tag.is_none() => {
                self.first_tag = Some(tag);
                count.tag = TagOf::Other(1);
            }
            Some(tag) => {
                self.more_tags.push(tag);
                count.tag = TagOf::Other(1 + self.more_tags.len() as u8);
            }
        }
        *place = count;
        self.len += 1;
    }

    /// The other tag `i` ([`TagOf::Other`], from 1).
    pub(super) fn tag(&self, i: u8) -> Option<&Tag> {
        match i {
            0 => None,
            1 => self.first_tag.as_ref(),
            i => self.more_tags.get(usize::from(i) - 2),
        }
    }
}

/// A `key=` value's hash tag (`keys::own_tag`'s bytes, inline).
pub fn own_tag(value: &[u8]) -> Tag {
    Tag::of_parts(&[OWN_KEY, value])
}

impl Count {
    pub(super) fn key(&self) -> ClientKey<'static> {
        match self.approx {
            true => ClientKey::Approx(self.limit),
            false => ClientKey::Window(self.limit),
        }
    }
}

/// The head of `route` that is the tag of `key=` value `value`'s counts,
/// where `route` is a `slot=net` client's and `value` its network
/// (`keys::in_client_slot`: `@key=<value>}{...`, the value's tag
/// `own_tag(value)` as it is, a network's text needing no escape).
pub(super) fn route_head(route: &[u8], value: &[u8]) -> Option<TagOf> {
    if !keys::in_client_slot(route, value) {
        return None;
    }
    let n = u8::try_from(b"@key=".len() + value.len()).ok()?;
    debug_assert_eq!(route.get(..usize::from(n)), Some(own_tag(value).as_bytes()));
    Some(TagOf::RouteHead(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::calls::{Calls, Part};
    use crate::cluster::keys;
    use crate::limiter::breaker::BreakerRules;
    use crate::limiter::{KeyId, Limit, Limits};
    use crate::store::{Offence, Subject};

    /// The words of a call from its 4th (its keys first).
    fn keys_of(command: &[u8], n: usize) -> Vec<Vec<u8>> {
        let words = command.split(|&b| b == b'\n').skip(1).skip(1).step_by(2);
        let words: Vec<&[u8]> = words.map(|w| w.strip_suffix(b"\r").unwrap()).collect();
        words[3..3 + n].iter().map(|w| w.to_vec()).collect()
    }

    #[test]
    fn each_calls_count_keys_are_the_names_the_key_layout_writes() {
        let rate = |requests| RateLimit {
            requests,
            window_ms: 60_000,
        };
        let calls = Calls::new("ps:", 1, 1, true);
        for approx in [false, true] {
            let with = |limit: Limit| if approx { limit.approx() } else { limit };
            let mut limits = Limits::NONE;
            limits.add(with(Limit::new(rate(5)))).unwrap();
            let net = with(Limit::new(rate(100)).keyed(KeyId::of("$pow_shield_net")));
            limits.add(net).unwrap();
            let subject = Subject {
                key: b"10.0.0.1",
                limits: &limits,
                key_values: &[None, Some(b"10.0.0.0/24")],
                rules: BreakerRules::default(),
                rising: false,
            };
            let name = |tag: &[u8], which| {
                let mut w = Vec::new();
                keys::write(&mut w, b"ps:", tag, which);
                w
            };
            let count = |tag: &[u8], limit| match approx {
                true => name(tag, ClientKey::Approx(limit)),
                false => name(tag, ClientKey::Window(limit)),
            };
            let parts: Vec<Part> = calls.parts(b"@10.0.0.1", &subject, Offence::Unpaid);
            let net = own_tag(b"10.0.0.0/24");
            let expected = [
                count(&net, rate(100)),
                name(&net, ClientKey::Refused(rate(100))),
            ];
            // The /24's count alone (the count script), gathered (the counts
            // script), and the client's part in the stacked script.
            let alone = calls.alone(&parts[1], 7);
            assert_eq!(keys_of(&alone.evalsha, 2), expected, "approx {approx}");
            let both = [(&parts[1], 7), (&parts[1], 8)];
            let gathered = calls.counts(&both).unwrap();
            let twice = [expected.clone(), expected.clone()].concat();
            assert_eq!(keys_of(&gathered.evalsha, 4), twice, "approx {approx}");
            let client = calls.stacked(&parts[0], 7);
            let client_keys = [
                count(b"@10.0.0.1", rate(5)),
                name(b"@10.0.0.1", ClientKey::Refused(rate(5))),
            ];
            assert_eq!(
                keys_of(&client.evalsha, 5)[3..],
                client_keys,
                "approx {approx}"
            );
        }
    }

    #[test]
    fn a_slot_net_clients_network_count_takes_the_networks_own_keys() {
        // The network's tag taken from the head of the client's: the same
        // names as the network's own tag writes, for IPv4, IPv6 and
        // `unix:` (and none for a value that is not the network: the
        // IPv6 client's own /64, or one that only starts like it).
        use crate::redis::cluster::ClientSlot;
        let calls = Calls::new("ps:", 1, 1, true).with_client_slot(ClientSlot::Net);
        let rate = RateLimit {
            requests: 1_000_000,
            window_ms: 1_000,
        };
        let mut limits = Limits::NONE;
        limits.add(Limit::new(rate)).unwrap();
        let per_net = RateLimit {
            requests: 600,
            ..rate
        };
        let net = Limit::new(per_net).keyed(KeyId::of("$pow_shield_net"));
        limits.add(net).unwrap();
        for (key, value) in [
            (&b"\x00203.0.113.7"[..], &b"203.0.113.0/24"[..]),
            (b"\x002001:db8:1:2::/64", b"2001:db8:1::/48"),
            (b"\x002001:db8:1:2::/64", b"2001:db8:1:2::/64"),
            (b"\x00unix:", b"unix:"),
            (b"\x00203.0.113.7", b"203.0.113.0/2"),
        ] {
            let subject = Subject {
                key,
                limits: &limits,
                key_values: &[None, Some(value)],
                rules: BreakerRules::default(),
                rising: false,
            };
            let tag = calls.tag(key);
            let part = calls.whole(&tag, &subject, Offence::Unpaid);
            let mut expected = Vec::new();
            let count = ClientKey::Window(per_net);
            keys::write(&mut expected, b"ps:", &own_tag(value), count);
            let stacked = calls.stacked(&part, 7);
            assert_eq!(keys_of(&stacked.evalsha, 7)[5], expected, "{value:?}");
            let undo = calls.undo(&part, 7).unwrap();
            assert_eq!(keys_of(&undo.evalsha, 2)[1], expected, "{value:?}");
        }
    }

    #[test]
    fn a_part_whose_one_count_is_under_another_tag_goes_by_the_stacked_script() {
        // One Redis: the client's part holds the /24's count, under the
        // /24's tag, not its route's; no breaker.
        let calls = Calls::new("ps:", 1, 1, false);
        let mut limits = Limits::NONE;
        let rate = RateLimit {
            requests: 100,
            window_ms: 60_000,
        };
        limits
            .add(Limit::new(rate).keyed(KeyId::of("$pow_shield_net")))
            .unwrap();
        let subject = Subject {
            key: b"10.0.0.1",
            limits: &limits,
            key_values: &[Some(b"10.0.0.0/24")],
            rules: BreakerRules::default(),
            rising: false,
        };
        let part = calls.whole(b"@10.0.0.1", &subject, Offence::Unpaid);
        assert_eq!(part.alone(), super::super::Alone::Stacked);
        assert_eq!(
            calls.alone(&part, 7).evalsha,
            calls.stacked(&part, 7).evalsha
        );
    }

    #[test]
    fn a_values_tag_is_keys_own_tag() {
        for value in [&b"10.0.0.0/24"[..], b"", b"site", &[0xff; 80]] {
            let tag = own_tag(value);
            assert_eq!(
                tag.as_bytes(),
                crate::cluster::keys::own_tag(value).as_bytes()
            );
        }
    }

    #[test]
    fn counts_keep_each_count_in_order_and_its_tag() {
        let mut counts = Counts::new();
        let tags: Vec<Option<Tag>> = (0..MAX_LIMITS + 1)
            .map(|i| (i % 3 != 0).then(|| Tag::of(format!("t{i}").as_bytes())))
            .collect();
        for (i, tag) in tags.iter().enumerate() {
            let limit = RateLimit {
                requests: i as u32,
                window_ms: 1_000,
            };
            let count = Count {
                tag: TagOf::Route,
                limit,
                approx: i % 2 == 0,
                own: true,
                keyed: false,
            };
            counts.push(count, tag.clone());
        }
        // None beyond MAX_LIMITS.
        assert_eq!(counts.len(), MAX_LIMITS);
        for (i, c) in counts.iter().enumerate() {
            assert_eq!((c.limit.requests, c.approx), (i as u32, i % 2 == 0));
            let other = match c.tag {
                TagOf::Other(i) => counts.tag(i),
                _ => None,
            };
            assert_eq!(other, tags[i].as_ref(), "{i}");
        }
        assert_eq!(counts.first().map(|c| c.limit.requests), Some(0));
        assert_eq!(counts.get(MAX_LIMITS), None);
    }
}

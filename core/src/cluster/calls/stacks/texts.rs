//! What a part's limits write in its stacked call, the same call after
//! call while requests come under the same location's limits: its
//! arguments after its member (`part_args`) and each count's key tail,
//! made once and copied while the next part is under the same
//! ([`Part::same_set`]). Measured: written anew, some 1,000 instructions
//! a request of two limits (their numbers and tails in decimal).

use super::{part_args, part_words, Part, TagOf};
use crate::cluster::calls::Calls;
use crate::cluster::keys::{self, ClientKey};
use crate::limiter::MAX_LIMITS;
use crate::redis::script_call::{widened, ScriptCall, Wide, WIDE};

/// At most so many sets of limits' texts kept (a worker's locations have
/// few; the oldest goes first): requests of locations under different
/// limits, in turn, each find theirs.
const KEPT: usize = 4;

/// What a stacked call starts with: the stacked script's SHA, and
/// whether a Redis Cluster's (its slot's generation key one key more).
pub(in crate::cluster::calls) type Start<'a> = (&'a str, bool);

/// The texts of the last few sets of limits.
#[derive(Clone, Debug, Default)]
pub(in crate::cluster::calls) struct KeptTexts {
    kept: Vec<Texts>,
    /// The next to go when a set not kept comes.
    next: usize,
}

impl KeptTexts {
    /// The texts of `part`'s limits: those kept for a part under the same
    /// ([`Part::same_set`]), or made now in place of the oldest.
    pub(in crate::cluster::calls) fn of(&mut self, part: &Part, start: Start) -> &Texts {
        let kept = self
            .kept
            .iter()
            .position(|t| t.of.as_ref().is_some_and(|of| of.same_set(part)));
        let at = match kept {
            // (Compared once: measured, a second `same_set` of the same
            // part.)
            Some(at) => return &self.kept[at],
            None if self.kept.len() < KEPT => {
                self.kept.push(Texts::default());
                self.kept.len() - 1
            }
            None => {
                let at = self.next % KEPT;
                self.next = at + 1;
                at
            }
        };
        self.kept[at].of(part, start)
    }
}

/// The text of a part's limits.
#[derive(Clone, Debug, Default)]
pub(in crate::cluster::calls) struct Texts {
    /// The part they were made for (`None`: none yet).
    of: Option<Part>,
    /// Its stacked call's start (`EVALSHA <sha> <numkeys>`), and its
    /// arguments after its member, encoded, and how many words. (The start
    /// also holds what `same_set` does not compare, the script's SHA and
    /// whether the call names a slot's key: the same for every part of the
    /// one `Calls` that keeps these texts. Texts shared between `Calls`
    /// would have to compare them too.)
    start: Option<ScriptCall>,
    args: Vec<u8>,
    words: usize,
    /// Each count's key tail (`keys::tail`), one after the other, and
    /// where each ends.
    tails: Vec<u8>,
    ends: [usize; MAX_LIMITS],
    /// What follows each key's tag, `}<tail>\r\n`, in [`WIDE`] bytes: the
    /// breaker's three, then each count's and its refusals' (`None`: not
    /// made, [`Calls::wide_part_keys`] writes no key).
    closes: Option<Vec<([u8; WIDE], usize)>>,
}

impl Texts {
    /// These texts, made for `part` unless they are already (for a part
    /// under the same limits, rules and offence: the same text).
    pub(in crate::cluster::calls) fn of(&mut self, part: &Part, start: Start) -> &Texts {
        if !self.of.as_ref().is_some_and(|of| of.same_set(part)) {
            self.make(part, start);
        }
        self
    }

    fn make(&mut self, part: &Part, (sha, cluster): Start) {
        let keys = 3 + 2 * part.counts.len() + usize::from(cluster);
        self.start = Some(ScriptCall::new(sha, keys, 2 + part_words(part)));
        let words = part_words(part);
        let mut args = ScriptCall::words(words);
        part_args(&mut args, part);
        (self.args, self.words) = (args.finish().0, words);
        self.tails.clear();
        for (c, end) in part.counts.iter().zip(&mut self.ends) {
            let mut room = [0u8; keys::LIMIT_TAIL];
            // (A limit's keys always have a tail.)
            let tail = keys::tail(c.key(), &mut room).unwrap_or_default();
            self.tails.extend_from_slice(tail);
            *end = self.tails.len();
        }
        self.closes = self.make_closes(part);
        self.of = Some(part.clone());
    }

    /// [`Texts::closes`] of `part`'s keys.
    fn make_closes(&self, part: &Part) -> Option<Vec<([u8; WIDE], usize)>> {
        let breaker = [ClientKey::Strikes, ClientKey::Trips, ClientKey::Unpaid]
            .map(|which| keys::tail(which, &mut [0; keys::LIMIT_TAIL]).map(<[u8]>::to_vec));
        let counts = (0..part.counts.len()).flat_map(|i| {
            let tail = self.tail(i);
            let mut refused = tail.to_vec();
            // (`:w:…`, `:a:…`: its refusals' `:o:…`.)
            if let Some(letter) = refused.get_mut(1) {
                *letter = keys::REFUSED;
            }
            [Some(tail.to_vec()), Some(refused)]
        });
        breaker
            .into_iter()
            .chain(counts)
            .map(|tail| widened(&[b"}", tail?.as_slice(), b"\r\n"].concat()))
            .collect()
    }

    /// The start of the part's stacked call, up to its keys.
    pub(in crate::cluster::calls) fn start(&self) -> Option<&ScriptCall> {
        self.start.as_ref()
    }

    /// The arguments after the member, and how many words.
    pub(in crate::cluster::calls) fn args(&self) -> (&[u8], usize) {
        (&self.args, self.words)
    }

    /// The key tail of count `i`.
    pub(in crate::cluster::calls) fn tail(&self, i: usize) -> &[u8] {
        let start = match i {
            0 => 0,
            i => self.ends.get(i - 1).copied().unwrap_or(0),
        };
        let end = self.ends.get(i).copied().unwrap_or(0);
        self.tails.get(start..end).unwrap_or_default()
    }
}

impl Calls {
    /// What this mode's stacked calls start with.
    pub(in crate::cluster::calls) fn stacked_start(&self) -> Start<'static> {
        (&self.scripts.stacked.sha1, self.cluster)
    }

    /// [`Calls::part_keys`] written whole in `Calls::wide` and copied into
    /// `call` at once ([`crate::redis::script_call::WideKeys`]); `false`
    /// (nothing written) where a piece does not fit: a prefix of 64 bytes
    /// or more, a tag held on the heap, a key not of 10 to 99 bytes.
    pub(in crate::cluster::calls) fn wide_part_keys(
        &self,
        call: &mut ScriptCall,
        part: &Part,
        texts: &Texts,
    ) -> bool {
        let (Some((head, len)), Some(closes)) = (&self.head, &texts.closes) else {
            return false;
        };
        let (Ok(mut keys), Some(head)) = (self.wide.try_borrow_mut(), Wide::of(head, *len)) else {
            return false;
        };
        keys.clear();
        let n = part.counts.len();
        let (Some(route), Some((breaker, counts))) = (
            part.wide_tag(TagOf::Route),
            closes.get(..3 + 2 * n).map(|c| c.split_at(3)),
        ) else {
            return false;
        };
        // (Written in plain loops, each key's pieces taken once: measured,
        // an iterator of every key's tag cost some 45 instructions a key.)
        let mut written = true;
        for (close, len) in breaker {
            written &= Wide::of(close, *len).is_some_and(|close| keys.key(head, route, close));
        }
        for (c, closes) in part.counts.iter().zip(counts.chunks_exact(2)) {
            let Some(tag) = part.wide_tag(c.tag) else {
                return false;
            };
            for (close, len) in closes {
                written &= Wide::of(close, *len).is_some_and(|close| keys.key(head, tag, close));
            }
        }
        if !written {
            return false;
        }
        call.encoded(keys.words());
        #[cfg(test)]
        WIDE_WRITTEN.with(|n| n.set(n.get() + 1));
        true
    }
}

// Calls whose keys `wide_part_keys` wrote, on this thread: only
// callgrind would show a silent fall back to the slow path.
#[cfg(test)]
thread_local! {
    static WIDE_WRITTEN: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

impl Part {
    /// A count's hash tag ([`Part::tag`]) as a [`Wide`] piece (`None`:
    /// one held on the heap).
    fn wide_tag(&self, tag: TagOf) -> Option<Wide<'_>> {
        let (route, len) = self.route.inline()?;
        match tag {
            TagOf::Route => Wide::of(route, len),
            TagOf::RouteHead(n) => Wide::of(route, usize::from(n).min(len)),
            TagOf::Other(i) => {
                let (bytes, len) = self.counts.tag(i)?.inline()?;
                Wide::of(bytes, len)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::WIDE_WRITTEN;
    use crate::cluster::calls::Calls;
    use crate::limiter::breaker::{BanRule, BreakerRules, StrikeRule};
    use crate::limiter::{KeyId, Limit, Limits, RateLimit};
    use crate::store::{Offence, Subject};

    fn rate(requests: u32, window_ms: u64) -> RateLimit {
        RateLimit {
            requests,
            window_ms,
        }
    }

    #[test]
    fn a_stacked_call_after_others_is_the_call_made_first() {
        // Parts in turn under other limits, `approx`, another count, other
        // rules, another offence, and back: each call as a fresh `Calls`
        // makes it (the texts of the last part's limits never leak into
        // the next's).
        let mut one = Limits::NONE;
        one.add(Limit::new(rate(5, 60_000))).unwrap();
        let net = Limit::new(rate(1_000_000, 1_000)).keyed(KeyId::of("$pow_shield_net"));
        one.add(net).unwrap();
        let mut approx = Limits::NONE;
        approx.add(Limit::new(rate(5, 60_000)).approx()).unwrap();
        approx.add(net.approx()).unwrap();
        let mut other = Limits::NONE;
        other.add(Limit::new(rate(5, 60_001))).unwrap();
        other.add(net).unwrap();
        // The same limits, each counted the other way (per `key=`, per
        // client): only `own` differs.
        let mut swapped = Limits::NONE;
        swapped
            .add(Limit::new(rate(5, 60_000)).keyed(KeyId::of("$pow_shield_net")))
            .unwrap();
        swapped.add(Limit::new(rate(1_000_000, 1_000))).unwrap();
        let net_first: &[Option<&[u8]>] = &[Some(b"203.0.113.0/24"), None];
        let mut three = other;
        three.add(Limit::new(rate(7, 1_000))).unwrap();
        let strict = BreakerRules {
            strikes: Some(StrikeRule {
                threshold: 3,
                ttl_ms: 86_400_000,
            }),
            ban: Some(BanRule {
                after: 2,
                ttl_ms: 3_600_000,
            }),
        };
        let values: &[Option<&[u8]>] = &[None, Some(b"203.0.113.0/24"), None];
        let subject = |limits, rules| Subject {
            key: b"\x00203.0.113.7",
            limits,
            key_values: values,
            rules,
            rising: false,
        };
        let plain = BreakerRules::default();
        let turns = [
            (subject(&one, plain), Offence::Unpaid),
            (subject(&one, plain), Offence::Unpaid),
            (
                Subject {
                    key_values: net_first,
                    ..subject(&swapped, plain)
                },
                Offence::Unpaid,
            ),
            (subject(&one, plain), Offence::Unpaid),
            (subject(&approx, plain), Offence::Unpaid),
            (subject(&other, plain), Offence::Unpaid),
            (subject(&three, plain), Offence::Unpaid),
            (subject(&one, strict), Offence::Unpaid),
            (subject(&one, strict), Offence::Failed),
            (subject(&one, plain), Offence::Unpaid),
        ];
        let calls = Calls::new("ps:", 1, 1, true);
        for (seq, (subject, offence)) in turns.iter().enumerate() {
            let tag = calls.tag(subject.key);
            let part = calls.whole(&tag, subject, *offence);
            let fresh = Calls::new("ps:", 1, 1, true);
            let seq = seq as u64;
            assert_eq!(
                calls.stacked(&part, seq),
                fresh.stacked(&part, seq),
                "{seq}"
            );
            let twice = [(&part, seq), (&part, seq + 1)];
            assert_eq!(calls.stacks(&twice), fresh.stacks(&twice), "{seq}");
        }
    }

    #[test]
    fn the_benchs_slot_net_request_writes_its_keys_whole() {
        // bench/callgrind.sh's cluster3net_two: `slot=net`, the client's
        // own limit and `key=$pow_shield_net`, an IPv4 client (and one of
        // the longest), with and without a breaker: one call, its seven
        // keys written by `wide_part_keys`, as a gathered call's too.
        use crate::redis::cluster::ClientSlot;
        let calls = Calls::new("pow:", 1, 1, true).with_client_slot(ClientSlot::Net);
        let mut limits = Limits::NONE;
        limits.add(Limit::new(rate(1_000_000, 1_000))).unwrap();
        let net = Limit::new(rate(1_000_000, 1_000)).keyed(KeyId::of("$pow_shield_net"));
        let name = crate::limiter::LimitName::new("net").unwrap();
        limits.add(net.with_name(name)).unwrap();
        let strict = BreakerRules {
            strikes: Some(StrikeRule {
                threshold: 5,
                ttl_ms: 86_400_000,
            }),
            ban: None,
        };
        for (key, value) in [
            (&b"\x00127.0.0.1"[..], &b"127.0.0.0/24"[..]),
            (b"\x00203.113.255.254", b"203.113.255.0/24"),
        ] {
            for rules in [BreakerRules::default(), strict] {
                let subject = Subject {
                    key,
                    limits: &limits,
                    key_values: &[None, Some(value)],
                    rules,
                    rising: false,
                };
                let tag = calls.tag(key);
                let part = calls.whole(&tag, &subject, Offence::Unpaid);
                let written = || WIDE_WRITTEN.with(|n| n.get());
                let before = written();
                calls.stacked(&part, 7);
                assert_eq!(written(), before + 1, "{key:?}");
                calls.stacks(&[(&part, 7), (&part, 8)]);
                assert_eq!(written(), before + 3, "{key:?}");
            }
        }
    }
}

//! What a part's limits write in its stacked call, the same call after
//! call while requests come under the same location's limits: its
//! arguments after its member (`part_args`) and each count's key tail,
//! made once and copied while the next part is under the same
//! ([`Part::same_set`]). Measured: written anew, some 1,000 instructions
//! a request of two limits (their numbers and tails in decimal).

use super::{part_args, part_words, Part};
use crate::cluster::keys;
use crate::limiter::MAX_LIMITS;
use crate::redis::script_call::ScriptCall;

/// At most so many sets of limits' texts kept (a worker's locations have
/// few; the oldest goes first): requests of locations under different
/// limits, in turn, each find theirs.
const KEPT: usize = 4;

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
    pub(in crate::cluster::calls) fn of(&mut self, part: &Part) -> &Texts {
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
        self.kept[at].of(part)
    }
}

/// The text of a part's limits.
#[derive(Clone, Debug, Default)]
pub(in crate::cluster::calls) struct Texts {
    /// The part they were made for (`None`: none yet).
    of: Option<Part>,
    /// Its arguments after its member, encoded, and how many words.
    args: Vec<u8>,
    words: usize,
    /// Each count's key tail (`keys::tail`), one after the other, and
    /// where each ends.
    tails: Vec<u8>,
    ends: [usize; MAX_LIMITS],
}

impl Texts {
    /// These texts, made for `part` unless they are already (for a part
    /// under the same limits, rules and offence: the same text).
    pub(in crate::cluster::calls) fn of(&mut self, part: &Part) -> &Texts {
        if !self.of.as_ref().is_some_and(|of| of.same_set(part)) {
            self.make(part);
        }
        self
    }

    fn make(&mut self, part: &Part) {
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
        self.of = Some(part.clone());
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

#[cfg(test)]
mod tests {
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
}

//! The words a limit makes in every one-limit check under it (its count's
//! key tail, `:w:<n>:<ms>`, and its numbers as two arguments) and those
//! of the breaker rules, made once and copied after: the same few limits
//! and rules come request after request (measured: written anew, some
//! 300 instructions a check in decimal).

use crate::cluster::keys::{self, ClientKey};
use crate::cluster::scripts::args;
use crate::limiter::breaker::BreakerRules;
use crate::limiter::RateLimit;
use crate::redis::script_call::ScriptCall;

/// At most so many limits' words kept (a location has few; the oldest
/// goes first).
const KEPT: usize = 4;

/// The words of the last limits and rules checked.
#[derive(Clone, Debug, Default)]
pub(super) struct LimitWords {
    kept: Vec<Words>,
    /// The next to go when a limit not kept comes.
    next: usize,
    /// The last rules, as their four arguments.
    rules: Option<(BreakerRules, Vec<u8>)>,
}

/// One limit's words.
#[derive(Clone, Debug)]
pub(super) struct Words {
    limit: RateLimit,
    approx: bool,
    /// Its count's key tail (`keys::tail`: its counter's, `approx`).
    tail: Vec<u8>,
    /// `<requests>` and `<window_ms>`, encoded.
    numbers: Vec<u8>,
}

impl Words {
    fn of(limit: RateLimit, approx: bool) -> Words {
        let key = match approx {
            true => ClientKey::Approx(limit),
            false => ClientKey::Window(limit),
        };
        let mut room = [0u8; keys::LIMIT_TAIL];
        // (A limit's keys always have a tail.)
        let tail = keys::tail(key, &mut room).unwrap_or_default().to_vec();
        let mut numbers = ScriptCall::words(2);
        numbers.num(limit.requests.into()).num(limit.window_ms);
        Words {
            limit,
            approx,
            tail,
            numbers: numbers.finish().0,
        }
    }

    /// Its count's key tail.
    pub(super) fn tail(&self) -> &[u8] {
        &self.tail
    }

    /// Its numbers as two encoded arguments (`ScriptCall::encoded`).
    pub(super) fn numbers(&self) -> (&[u8], usize) {
        (&self.numbers, 2)
    }
}

impl LimitWords {
    /// The words of `limit` (its counter's, `approx`) and of `rules` (if
    /// asked: `None`, no words), made unless kept.
    pub(super) fn of(
        &mut self,
        (limit, approx): (RateLimit, bool),
        rules: Option<BreakerRules>,
    ) -> (&Words, (&[u8], usize)) {
        let kept = self
            .kept
            .iter()
            .position(|w| w.limit == limit && w.approx == approx);
        let at = match kept {
            Some(at) => at,
            None if self.kept.len() < KEPT => {
                self.kept.push(Words::of(limit, approx));
                self.kept.len() - 1
            }
            None => {
                let at = self.next % KEPT;
                self.next = at + 1;
                self.kept[at] = Words::of(limit, approx);
                at
            }
        };
        let Some(rules) = rules else {
            return (&self.kept[at], (&[], 0));
        };
        if self.rules.as_ref().is_none_or(|(of, _)| *of != rules) {
            let mut words = ScriptCall::words(4);
            for rule in args::rules(rules) {
                words.num(rule);
            }
            self.rules = Some((rules, words.finish().0));
        }
        let words = self.rules.as_ref().map_or(&[][..], |(_, w)| w);
        (&self.kept[at], (words, 4))
    }
}

#[cfg(test)]
mod tests {
    use crate::cluster::calls::Calls;
    use crate::limiter::breaker::{BanRule, BreakerRules, StrikeRule};
    use crate::limiter::{KeyId, Limit, Limits, RateLimit};
    use crate::store::{Offence, Subject};

    #[test]
    fn a_check_after_others_is_the_check_made_first() {
        // One-limit checks in turn under more limits than are kept, exact
        // and `approx`, and other rules, and back; and a network's count
        // alone (no rules): each call as a fresh `Calls` makes it.
        let rate = |requests, window_ms| RateLimit {
            requests,
            window_ms,
        };
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
        let rates = [
            rate(5, 60_000),
            rate(1_000_000, 1_000),
            rate(5, 60_001),
            rate(6, 60_000),
            rate(7, 1_000),
            rate(5, 60_000),
        ];
        let calls = Calls::new("ps:", 1, 1, true);
        let mut seq = 0;
        for rules in [BreakerRules::default(), strict, BreakerRules::default()] {
            for approx in [false, true, false] {
                for limit in rates {
                    let with = |l: Limit| if approx { l.approx() } else { l };
                    let one = Limits::one(limit);
                    let mut limits = Limits::NONE;
                    limits.add(with(Limit::new(limit))).unwrap();
                    let mut net = Limits::NONE;
                    let keyed = Limit::new(limit).keyed(KeyId::of("$pow_shield_net"));
                    net.add(with(keyed)).unwrap();
                    let values: &[Option<&[u8]>] = &[Some(b"203.0.113.0/24")];
                    let subject = |limits, key_values| Subject {
                        key: b"\x00203.0.113.7",
                        limits,
                        key_values,
                        rules,
                        rising: false,
                    };
                    let fresh = Calls::new("ps:", 1, 1, true);
                    seq += 1;
                    for (subject, offence) in [
                        (subject(&limits, &[]), Offence::Unpaid),
                        (subject(&one, &[]), Offence::Failed),
                    ] {
                        let tag = calls.tag(subject.key);
                        let (got, want) = (
                            calls.check(&tag, &subject, offence, 1, seq),
                            fresh.check(&tag, &subject, offence, 1, seq),
                        );
                        assert_eq!(got, want, "{limit:?} {approx} {rules:?}");
                    }
                    // The network's count in a part of its own.
                    let parts =
                        calls.parts(b"@203.0.113.7", &subject(&net, values), Offence::Unpaid);
                    let part = parts.last().unwrap();
                    assert_eq!(calls.alone(part, seq), fresh.alone(part, seq));
                }
            }
        }
    }
}

//! Refusals per limit key (docs/operations.md, "What is decided where"):
//! a location's stacked or keyed limits are checked in one call of the
//! stacked script, and the limit that refuses is known by whose count it
//! is: the client's (no `key=`), or a `key=` value's (a /24, an AS, the
//! site). The node keeps that refusal until its `T` under that key, as it
//! does a single limit's, so that every request counted by it (any
//! address of the /24) is refused on the node meanwhile: a network or the
//! site over its limit costs Redis one call per key and
//! `refusals::QUIET_FRESH_MS`, not one per request.
//!
//! A refusal by the client's own limit is a strike, counted here and sent
//! in the client's batch, as a single limit's; one by a `key=` value's
//! strikes no one (`Offence::refused`), and its count goes to Redis only
//! where a rising price reads it.

use super::batches::BatchContext;
use super::{Around, BlockOf, ClusterNode, Held, Look, Looked, Step, Waits};
use crate::cluster::refusals::{refusal_key, refusal_key_of, RefusalKey, Refused, BATCH_MS};
use crate::limiter::breaker::{BreakerRules, BreakerStatus};
use crate::limiter::client::OWN_KEY;
use crate::limiter::{RateLimit, MAX_LIMITS};
use crate::store::{Checked, Counted, Now, Subject};

/// No breaker: a `key=` value's refusals strike no one.
const NO_RULES: BreakerRules = BreakerRules {
    strikes: None,
    ban: None,
};

/// One counted limit of a stacked check, as the node keys its refusal.
#[derive(Clone, Debug)]
pub(super) struct KeyedLimit {
    /// Its place among the location's limits (`Verdict::limit`).
    pub at: u8,
    pub limit: RateLimit,
    /// Counted per client key (its refusal is a strike).
    pub own: bool,
    /// Its refusal's key in the zone and the batches.
    pub refusal: RefusalKey,
}

impl KeyedLimit {
    /// What a batch of its refusals needs (`subject`: the one it was
    /// made for, [`ClusterNode::keyed_limits`]): a `key=` value's count is
    /// `OWN_KEY` and the value's.
    pub fn context(&self, subject: &Subject) -> BatchContext {
        match (self.own, subject.counted(usize::from(self.at))) {
            (false, Some(Counted::Own(value))) => {
                BatchContext::new(self.limit, NO_RULES, [OWN_KEY, value].concat())
            }
            _ => BatchContext::of(subject, self.limit),
        }
    }

    /// The breaker rules its refusals follow.
    fn rules<'a>(&self, subject: &'a Subject) -> &'a BreakerRules {
        match self.own {
            true => &subject.rules,
            false => &NO_RULES,
        }
    }
}

impl<W: Waits> ClusterNode<W> {
    /// The limits the subject's request is counted by, in the order
    /// written, each keyed as the node keeps its refusals, into `out`
    /// (empty: a list a decided request gave back).
    pub(super) fn keyed_limits_in(&self, subject: &Subject, out: &mut Vec<KeyedLimit>) {
        // (One at a time: no list of all eight to fill and copy, measured
        // 100-odd instructions.)
        out.reserve_exact(subject.limits.len());
        out.extend(subject.counted_iter().map(|(at, limit, whose)| {
            let approx = subject.limits.approx(at);
            let (own, refusal) = match whose {
                Counted::Client(key) | Counted::Spends(key) => {
                    (true, refusal_key(self.scope, limit, approx, key))
                }
                Counted::Own(value) => {
                    let whose = (OWN_KEY, value);
                    (false, refusal_key_of(self.scope, limit, approx, whose))
                }
            };
            KeyedLimit {
                at: at as u8,
                limit,
                own,
                refusal,
            }
        }));
    }

    /// What the node holds of a request under stacked or keyed limits
    /// (`limits`, [`Self::keyed_limits`]), looked at once before it goes
    /// to Redis. With `refuse` (an unpaid request the node may answer),
    /// it is refused here by the first limit Redis refused until a `T`
    /// still ahead, in the order written. Redis decides when the client's
    /// own limit holds a refusal it will not answer here (its next strike
    /// would reach the threshold, or Redis's word is not fresh): a later
    /// `key=` limit must not answer for it without its strike.
    /// (`slot`: the client's, a Redis Cluster's.)
    ///
    /// Not refused, what the node counted under the limits goes now,
    /// before the call that asks Redis about them (as `send_batch_now`
    /// does for a single limit): Redis decides on every strike the node
    /// counted, and prices from every refusal of a key (a paid request's
    /// fresh challenge too).
    pub(super) fn look_keyed(
        &mut self,
        env: &mut impl Around,
        (subject, slot): (&Subject, u16),
        (limits, refuse, block): (&[KeyedLimit], bool, BlockOf),
        now: Now,
        out: &mut Vec<Step<W>>,
    ) -> Option<Checked> {
        if !env.has_zone() {
            return None;
        }
        // A Redis Cluster: the challenge carries the client's slot's
        // generation where this worker knows it. A refusal by the client's
        // own limit waits for it (Redis decides, and says it); one by a
        // `key=` value's does not (its challenge carries the node's own:
        // spent as one issued during an outage), so that new addresses of a
        // refused /24, each in a slot of its own, are refused here too.
        let generation = match self.cluster && refuse {
            true => self.generations.slot(slot),
            false => None,
        };
        let unknown = self.cluster && generation.is_none();
        // (At most `MAX_LIMITS`: on the stack.)
        let mut looks = [NO_LOOK; MAX_LIMITS];
        for (look, limit) in looks.iter_mut().zip(limits) {
            *look = Look {
                refusal: &limit.refusal,
                rules: limit.rules(subject),
                stale_ok: self.batches.awaiting(&limit.refusal),
                // The client's own limit: a refusal held, of which Redis
                // must count the next strike (or say the generation), is
                // Redis's.
                held: Held {
                    before: limit.own && unknown,
                    after: limit.own,
                },
            };
        }
        // (`Limits` holds at most `MAX_LIMITS`: every limit is looked at.)
        let looks = &looks[..limits.len().min(MAX_LIMITS)];
        let mut pending = [0; MAX_LIMITS];
        let at_now = (now.monotonic_ms, subject.rising);
        match env.look(looks, at_now, (refuse, block), &mut pending) {
            Some((at, Looked::Refused(refused))) => {
                let limit = limits.get(at)?;
                return Some(self.refused_keyed(env, (subject, limit), refused, generation, out));
            }
            Some((_, Looked::Blocked(breaker))) => return Some(super::blocked(breaker)),
            // (Held: Redis decides.)
            Some((_, Looked::Held)) | None => {}
        }
        for (limit, &n) in limits.iter().zip(&pending) {
            if n > 0 {
                self.batches
                    .add(&limit.refusal, n, || limit.context(subject));
            }
            self.send_batches(env, std::slice::from_ref(&limit.refusal), now, out);
        }
        None
    }

    /// A request `limit` refused here: its refusal counted (a strike, or
    /// a count a rising price reads) to go in a batch.
    fn refused_keyed(
        &mut self,
        env: &mut impl Around,
        (subject, limit): (&Subject, &KeyedLimit),
        refused: Refused,
        generation: Option<u64>,
        out: &mut Vec<Step<W>>,
    ) -> Checked {
        if limit.rules(subject).strikes.is_some() || subject.rising {
            let context = || limit.context(subject);
            self.batches.add(&limit.refusal, 0, context);
            self.arm(env, BATCH_MS, true, out);
        }
        let mut checked = Checked {
            generation,
            ..refused.checked
        };
        checked.verdict.limit = limit.at;
        if !limit.own {
            // The client's breaker is its own: nothing of it is known
            // from a network's refusal.
            checked.breaker = BreakerStatus::default();
            checked.struck = false;
        }
        checked
    }
}

/// A place in [`ClusterNode::look_keyed`]'s list not yet filled.
const NO_LOOK: Look = Look {
    refusal: &[],
    rules: &NO_RULES,
    stale_ok: false,
    held: Held::NEVER,
};

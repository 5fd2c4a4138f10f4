//! Who decides what Redis did not (docs/operations.md, "Choosing a fail
//! policy"): one rule for every request Redis failed, whether it failed
//! now (down, or its queue full) or later (the call timed out, the
//! connection dropped, a coalesced check it joined failed), and whether
//! the call reached Redis first. The module asks it in one place
//! (`src/store/mod.rs`) and carries out what it says.

use crate::store::{Offence, Op};

/// Why Redis did not answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Unavailable: not connected, in back-off, timed out, or the reply
    /// lost.
    Down,
    /// Connected, but `MAX_IN_FLIGHT` commands wait already: back-pressure.
    Busy,
}

/// A request Redis did not answer, as the rule needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unanswered {
    pub op: Op,
    pub failure: Failure,
    /// The call reached Redis, which may have run it before the answer
    /// was lost (a late failure).
    pub sent: bool,
    /// `pow_shield_fail local`: the zone decides for an unavailable Redis.
    pub fail_local: bool,
    /// The node has its zone (nginx mapped it).
    pub zone: bool,
    /// A spend only Redis can decide: a solution of a challenge issued in
    /// Redis's data generation (the zone does not know what other nodes
    /// spent through Redis).
    pub redis_only: bool,
}

/// What decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decider {
    /// The zone stands in for Redis (`Op::standing_in`).
    Zone {
        /// Redis may have counted a strike for this refusal that the zone
        /// does not (it ran the check, its reply was lost): the challenge
        /// sent marks it (`Checked::maybe_struck`), so that paying it takes
        /// one back.
        maybe_struck: bool,
        /// The zone spends (or records) a token Redis must learn of: it
        /// waits in the replay queue until Redis takes commands again.
        replay: bool,
    },
    /// Nobody: `Reply::Down`, and `pow_shield_fail` (`open`, `closed`)
    /// decides in the request.
    Policy,
    /// Not spent now (`Spent::Unavailable`): a fresh challenge, no strike.
    NotNow,
}

/// The one rule.
///
/// - A spend only Redis can decide is never the zone's: not now. (A
///   forgiven solution is Redis's too, but the zone records it: that is
///   what `Op::Forgive` is for.)
/// - A full queue is back-pressure, not an outage: the zone decides,
///   whatever `pow_shield_fail` says (never passed uncounted).
/// - An unavailable Redis: the zone under `local`, else the policy.
/// - Without a zone, the policy.
///
/// Only a spend the zone made is written to Redis later (`replay`): under
/// `open` or `closed` nothing was spent on the node, so there is nothing to
/// write (the replay queue skips a token the node's cache does not hold).
pub fn decider(asked: Unanswered) -> Decider {
    if asked.redis_only && matches!(asked.op, Op::Spend(_)) {
        return Decider::NotNow;
    }
    let zone = asked.zone && (asked.failure == Failure::Busy || asked.fail_local);
    if !zone {
        return Decider::Policy;
    }
    Decider::Zone {
        maybe_struck: asked.sent
            && asked.op
                == Op::Check {
                    offence: Offence::Unpaid,
                },
        replay: matches!(asked.op, Op::Spend(_) | Op::Forgive(_)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Solution;

    const SPEND: Op = Op::Spend(Solution {
        digest: [0; 32],
        spent_until_ms: 0,
        generation: None,
        forgive: false,
        retry_at_ms: None,
    });
    const FORGIVE: Op = Op::Forgive(Solution {
        digest: [0; 32],
        spent_until_ms: 0,
        generation: Some(7),
        forgive: true,
        retry_at_ms: None,
    });
    const UNPAID: Op = Op::Check {
        offence: Offence::Unpaid,
    };
    const PAID: Op = Op::Check {
        offence: Offence::None,
    };

    fn zone(maybe_struck: bool, replay: bool) -> Decider {
        Decider::Zone {
            maybe_struck,
            replay,
        }
    }

    #[test]
    fn every_unanswered_request_has_one_decider() {
        use Failure::{Busy, Down};
        // (op, failure, sent, fail_local, zone, redis_only) → decider
        #[rustfmt::skip]
        let table = [
            // An unavailable Redis: the zone under `local`, else the policy.
            (UNPAID, Down, false, true, true, false, zone(false, false)),
            (UNPAID, Down, false, false, true, false, Decider::Policy),
            // A late failure: Redis may have struck the refusal.
            (UNPAID, Down, true, true, true, false, zone(true, false)),
            (UNPAID, Down, true, false, true, false, Decider::Policy),
            // A paid check or a strike struck nothing unknown.
            (PAID, Down, true, true, true, false, zone(false, false)),
            (Op::Strike, Down, true, true, true, false, zone(false, false)),
            // A full queue: the zone, whatever the policy.
            (UNPAID, Busy, false, false, true, false, zone(false, false)),
            (Op::Strike, Busy, false, false, true, false, zone(false, false)),
            // The zone spends: Redis learns of it later.
            (SPEND, Down, false, true, true, false, zone(false, true)),
            (SPEND, Down, true, true, true, false, zone(false, true)),
            (SPEND, Busy, false, false, true, false, zone(false, true)),
            (FORGIVE, Down, false, true, true, false, zone(false, true)),
            (SPEND, Down, false, false, true, false, Decider::Policy),
            // Redis's generation: only Redis can spend it.
            (SPEND, Down, false, true, true, true, Decider::NotNow),
            (SPEND, Busy, false, false, true, true, Decider::NotNow),
            (SPEND, Down, true, true, true, true, Decider::NotNow),
            (FORGIVE, Down, false, true, true, true, zone(false, true)),
            (FORGIVE, Down, false, false, true, true, Decider::Policy),
            // (A check is never Redis-only.)
            (UNPAID, Down, false, true, true, true, zone(false, false)),
            // No zone: the policy.
            (UNPAID, Busy, false, true, false, false, Decider::Policy),
            (SPEND, Down, false, true, false, false, Decider::Policy),
        ];
        for (i, (op, failure, sent, fail_local, has_zone, redis_only, want)) in
            table.into_iter().enumerate()
        {
            let asked = Unanswered {
                op,
                failure,
                sent,
                fail_local,
                zone: has_zone,
                redis_only,
            };
            assert_eq!(decider(asked), want, "row {i}: {asked:?}");
        }
    }
}

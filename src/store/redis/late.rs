//! What a request asked of Redis, kept so that the fallback can decide it
//! if Redis fails it late (the request's own memory may be gone by then).

use crate::store::shm::ShmStore;
use pow_shield_core::limiter::breaker::BreakerRules;
use pow_shield_core::limiter::{Limits, Spent};
use pow_shield_core::store::{Checked, Offence, Op, Reply, Subject};

/// A request's operation, kept to ask the fallback if Redis fails it late
/// (the request's own memory may be gone by then: the key is copied).
pub(super) struct Late {
    op: Op,
    fallback: Option<(ShmStore, Copied)>,
    /// A spend only Redis can decide (a solution of Redis's generation: the
    /// zone does not know what other nodes spent through Redis): not spent
    /// now (a fresh challenge, no strike) instead of asking the fallback.
    pub(super) redis_only: bool,
    /// The call reached Redis (which may have run it before failing).
    sent: bool,
}

/// A [`Subject`] that owns its key.
struct Copied {
    key: Vec<u8>,
    limits: Limits,
    approx: bool,
    rules: BreakerRules,
    rising: bool,
}

impl Late {
    pub(super) fn new(op: Op, subject: &Subject, fallback: Option<ShmStore>) -> Self {
        let copied = || Copied {
            key: subject.key.to_vec(),
            limits: subject.limits,
            approx: subject.approx,
            rules: subject.rules,
            rising: subject.rising,
        };
        Late {
            op,
            fallback: fallback.map(|zone| (zone, copied())),
            redis_only: false,
            sent: true,
        }
    }

    /// The fallback's answer for a call that never reached Redis.
    pub(super) fn reply_unsent(self) -> Reply {
        Late {
            sent: false,
            ..self
        }
        .reply()
    }

    /// The fallback's answer now, or `Down` without one.
    pub(super) fn reply(self) -> Reply {
        if self.redis_only {
            return Reply::Spent(Spent::Unavailable);
        }
        let Some((zone, copied)) = self.fallback else {
            return Reply::Down;
        };
        let subject = Subject {
            key: &copied.key,
            limits: copied.limits,
            approx: copied.approx,
            rules: copied.rules,
            rising: copied.rising,
        };
        match zone.stand_in(self.op, &subject, crate::store::now()) {
            // Redis may have run the check before it failed late (only its
            // reply was lost) and counted the strike the zone did not: the
            // challenge sent takes one back when paid.
            Reply::Checked(checked)
                if self.sent
                    && self.op
                        == Op::Check {
                            offence: Offence::Unpaid,
                        } =>
            {
                Reply::Checked(Checked {
                    maybe_struck: !checked.verdict.allowed,
                    ..checked
                })
            }
            reply => reply,
        }
    }
}

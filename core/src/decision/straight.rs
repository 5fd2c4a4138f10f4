//! The straight path: local mode's common request decided in one pass, as
//! `limit_req` decides its own (key, lock, look up, count, unlock,
//! decline), without a [`Decision`](super::Decision), a
//! [`Reply`](crate::store::Reply) or a request state.
//!
//! Which locations have one is known at configuration ([`Straight::of`]):
//! one limit, counted per client key, no trap, no dry run (its rate-limit
//! headers are its verdict's, as the full path's are). Which requests take
//! it, the module says per request: local mode, no Web Bot Auth keys, the
//! request's first decision, no solution or token carried, a key that is
//! not exempt, and no breaker for the client in the zone. For those, the
//! window admits the request only when it finds at least one free request (the last free one is admitted,
//! remaining 0), or two with pay-ahead, where the last free one's next
//! challenge is priced ([`Straight::admit`]); else nothing is counted and
//! the full path decides. (A limit of 2 with pay-ahead is therefore
//! admitted here only its window's first request, and a limit of 1 with
//! pay-ahead never: such a location has no straight path, so that its
//! every request locks the zone once, not twice.) What it decides
//! ([`Straight::decided`]) is what the decision answers for the same
//! check (`tests/straight.rs`).

use super::{green, Final, Rules};
use crate::limiter::breaker::BreakerStatus;
use crate::limiter::window::{admit_within, SlidingWindow};
use crate::limiter::{RateLimit, Verdict};
use crate::store::{overage_reported, Checked, Offence};

/// A location's straight path: its one limit, and the requests that must
/// be free before one for the straight path to admit it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Straight {
    pub limit: RateLimit,
    room: u32,
}

impl Straight {
    /// The straight path of a location with `rules`; `None`: every
    /// request of it takes the full path.
    pub fn of(rules: &Rules) -> Option<Straight> {
        let [limit] = rules.limits.as_slice() else {
            return None;
        };
        let plain = limit.key.is_none() && !rules.trap && !rules.dry_run;
        // The last free request's next challenge is priced by the
        // decision (`green::admitted`).
        let room = if rules.pay_ahead { 2 } else { 1 };
        // A limit with fewer requests than that: the window never admits
        // one here.
        let room_ever = limit.rate.requests >= room;
        (plain && room_ever).then_some(Straight {
            limit: limit.rate,
            room,
        })
    }

    /// One request into the client's `window` at `now_ms` (monotonic): its
    /// verdict as the check reports it, and until when the window carries
    /// anything; `None`: nothing counted, the full path decides.
    #[inline(always)]
    pub fn admit(self, window: &mut SlidingWindow, now_ms: u64) -> Option<(Verdict, u64)> {
        let (verdict, keep_until_ms) = admit_within(window, self.limit, now_ms, self.room)?;
        Some((overage_reported(verdict, Offence::Unpaid), keep_until_ms))
    }

    /// The decision of a request the straight path admitted with
    /// `verdict`: the full decision's for the check that reports it, with
    /// no breaker.
    pub fn decided(verdict: Verdict) -> Final {
        green::passed(&Checked {
            verdict,
            breaker: BreakerStatus::default(),
            struck: false,
            generation: None,
            maybe_struck: false,
        })
    }
}

//! What the node asks of the zone about a request's limits before it
//! asks Redis ([`Around::look`](super::Around::look)).

use crate::cluster::refusals::Refused;
use crate::limiter::breaker::{BreakerRules, BreakerStatus};

/// A client whose block Redis reported is looked for first
/// ([`Around::look`](super::Around::look)): its key and breaker rules.
pub type BlockOf<'a> = Option<(&'a [u8], BreakerRules)>;

/// One of a request's limits, as the node looks up its refusal
/// ([`Around::look`](super::Around::look)).
#[derive(Clone, Copy, Debug)]
pub struct Look<'a> {
    /// Its refusal's key.
    pub refusal: &'a [u8],
    /// The breaker rules its refusals follow (borrowed: measured, a
    /// request's list of looks is filled for every place it may hold).
    pub rules: &'a BreakerRules,
    /// Redis owes this worker an answer for it: what it said last still
    /// holds (`LocalRefusal::refuse`).
    pub stale_ok: bool,
    /// When a refusal held leaves the request to Redis.
    pub held: Held,
}

/// When a refusal the node holds leaves the request to Redis
/// ([`Around::look`](super::Around::look)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// Held before it is refused here: Redis decides at once.
    pub before: bool,
    /// Held though not refused here (its word stale, the next strike
    /// Redis's): Redis decides.
    pub after: bool,
}

impl Held {
    /// A refusal held leaves nothing to Redis.
    pub const NEVER: Held = Held {
        before: false,
        after: false,
    };
}

/// What [`Around::look`](super::Around::look) found of a limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Looked {
    /// Refused here.
    Refused(Refused),
    /// A refusal the node holds leaves the request to Redis.
    Held,
    /// The client's block Redis reported holds (its place: 0).
    Blocked(BreakerStatus),
}

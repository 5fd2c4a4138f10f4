//! Web Bot Auth's replay cache (docs/bots.md, "Replays"): a signature's
//! nonce is recorded in the zone's spent table until its `expires` (and
//! the clock allowance), under the lock that also counts the bot's
//! metrics. A nonce seen again in that time is a replay. Like a spent
//! challenge, a record is never given up for room, and each bot has its
//! share of spent records (`store::spent`): when its share or the zone's
//! is used up, the request is not taken as the bot's (else it could be
//! replayed, or one bot's nonces would crowd out everyone else).
//!
//! In cluster mode too the cache is the node's zone: the verdict is needed
//! while the key is evaluated, where a Redis round trip cannot be waited
//! for; a nonce can then be replayed once to each other node within its
//! signature's lifetime (docs/bots.md says so).

use super::zone::record_owned;
use crate::shm::SharedZone;
use pow_shield_core::store::{Now, Recorded};

/// Records the nonce of bot `name` (`digest`: a hash of its key and
/// nonce) until `until_ms` (epoch), and counts the request in the bot's
/// metrics.
pub fn record_bot_nonce(
    zone: &SharedZone,
    name: &str,
    digest: &[u8; 32],
    until_ms: u64,
    now: Now,
) -> Recorded {
    record_owned(
        zone,
        name.as_bytes(),
        digest,
        until_ms,
        now,
        |zone, seen| {
            match seen {
                Recorded::New => zone.bots.verified(name),
                Recorded::Held => zone.bots.replayed(name),
                Recorded::NoRoom => {}
            }
            seen
        },
    )
}

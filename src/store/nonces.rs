//! Web Bot Auth's replay cache (docs/bots.md, "Replays"): a signature's
//! nonce is recorded in the zone's spent table until its `expires` (and
//! the clock allowance), under the lock that also counts the bot's
//! metrics. A nonce seen again in that time is a replay. Like a spent
//! challenge, a record is never given up for room: when none can be made,
//! the request is not taken as the bot's (else it could be replayed).
//!
//! In cluster mode too the cache is the node's zone: the verdict is needed
//! while the key is evaluated, where a Redis round trip cannot be waited
//! for; a nonce can then be replayed once to each other node within its
//! signature's lifetime (docs/bots.md says so).

use super::zone::record_spent;
use crate::shm::{SharedZone, TableKey};

/// What the cache knew of a nonce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonceSeen {
    /// Not before: recorded now.
    First,
    /// Recorded before and not yet expired: a replay.
    Again,
    /// No room for the record.
    NoRoom,
}

/// Records the nonce of bot `name` (`digest`: a hash of its key and
/// nonce) until `until_ms` (epoch), and counts the request in the bot's
/// metrics.
pub fn record_bot_nonce(
    zone: &SharedZone,
    name: &str,
    digest: &[u8; 32],
    until_ms: u64,
    now_ms: u64,
) -> NonceSeen {
    let key = TableKey::new(&[digest]);
    zone.with_locked(|zone, alloc| {
        zone.spent
            .expire(alloc, now_ms, super::zone::EXPIRE_PER_REQUEST);
        let seen = match record_spent(zone, alloc, &key, until_ms, now_ms) {
            Ok(true) => NonceSeen::First,
            Ok(false) => NonceSeen::Again,
            Err(_) => NonceSeen::NoRoom,
        };
        match seen {
            NonceSeen::First => zone.bots.verified(name),
            NonceSeen::Again => zone.bots.replayed(name),
            NonceSeen::NoRoom => {}
        }
        seen
    })
}

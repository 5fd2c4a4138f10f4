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
use pow_shield_core::store::spent::{class_lifetime_ms, lifetime_class};
use pow_shield_core::store::{Now, Recorded};

/// Before a bot's name as the owner of its nonces' share: no client key
/// has it (keys from requests have no NUL byte; the default key is a NUL
/// mark and 4, 8 or 16 address bytes).
const BOT_OWNER: &[u8] = b"\0\0bot\0";

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
    let owner = [BOT_OWNER, name.as_bytes()].concat();
    // A bot's share is counted over the lifetime class of its signatures
    // (a minute's for the clients' 60 s), not the longest one accepted:
    // a bot signing for an hour would otherwise get a sixtieth of the
    // rate. A bot that mixes lifetimes gets a share per class it uses,
    // within the zone's half for every spent record.
    let longest_ms = class_lifetime_ms(lifetime_class(until_ms.saturating_sub(now.epoch_ms)));
    record_owned(
        zone,
        &owner,
        digest,
        (until_ms, longest_ms),
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

//! Spent records (a challenge's token, a bot's signature nonce) as a share
//! of a table store that no one key can take from the others
//! (docs/operations.md, "Sizing the zone"). A spent record is never
//! given up before it expires (that would reopen its token to replay), so
//! what a store must bound is how many are made:
//!
//! - in all, at most half the store's entries: the other half is always
//!   there for buckets and breakers, so paying clients never crowd out
//!   the ones that do not pay;
//! - per key (a client, a bot), at most an eighth of that, counted in a
//!   sliding window as long as its records can live (the longest
//!   challenge TTL of the configuration and the 5 s allowance; a bot's
//!   longest signature): one key's live records never exceed its share.
//!
//! A record that cannot be made is no offence of anyone's: the payer gets
//! a fresh challenge (`Spent::NotRecorded`), a bot's request is taken as
//! unsigned.
//!
//! Records live until their own expiry, whatever it is (a 1 s challenge
//! beside a 10 min one, a bot's nonce): a store keeps them in queues by
//! [`lifetime_class`], in each of which insertion order is close to
//! expiry order, so each is reclaimed at most one class width late.

use crate::limiter::RateLimit;

/// Lifetime classes: class 0 holds records of at most 1 s, class `c`
/// those of at most 2^c s; the last (2^17 s, 36 h) holds every longer one,
/// and a record lives at most a day and 5 s (`pow_shield_challenge_ttl`).
pub const LIFETIME_CLASSES: usize = 18;

/// The class of a record that lives `lifetime_ms` from now.
pub fn lifetime_class(lifetime_ms: u64) -> usize {
    let seconds = lifetime_ms.div_ceil(1000).max(1);
    // ceil(log2(seconds)): 1 s -> 0, 2 s -> 1, 3..4 s -> 2, ...
    let class = (u64::BITS - (seconds - 1).leading_zeros()) as usize;
    class.min(LIFETIME_CLASSES - 1)
}

/// The longest lifetime of class `class` (the last class: its floor).
pub fn class_lifetime_ms(class: usize) -> u64 {
    1000u64 << class.min(LIFETIME_CLASSES - 1)
}

/// The part of a store spent records may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpentRoom {
    /// Spent records the store holds at most, of every key.
    pub most: u64,
    /// Records one key may make within the longest lifetime of its
    /// records.
    pub per_key: u32,
    /// The longest a spent challenge's record lives: the longest challenge
    /// TTL of the configuration and the 5 s allowance.
    pub token_lifetime_ms: u64,
}

impl SpentRoom {
    /// Share of the store's entries spent records may take, and share of
    /// that one key may.
    const OF_STORE: u64 = 2;
    const OF_SPENT: u64 = 8;

    /// The room of a store with room for `entries` entries of any table,
    /// whose spent challenges' records live at most `token_lifetime_ms`.
    pub fn of_store(entries: u64, token_lifetime_ms: u64) -> Self {
        let most = (entries / Self::OF_STORE).max(1);
        let per_key = (most / Self::OF_SPENT).clamp(1, u64::from(u32::MAX));
        SpentRoom {
            most,
            per_key: per_key as u32,
            token_lifetime_ms,
        }
    }

    /// Unbounded (a store in process memory).
    pub const UNBOUNDED: SpentRoom = SpentRoom {
        most: u64::MAX,
        per_key: u32::MAX,
        token_lifetime_ms: 65_000,
    };

    /// The sliding window that bounds one key's records, which live at
    /// most `longest_ms`: its share within that time (whole seconds), so
    /// that no more of them are alive at once.
    pub fn quota(&self, longest_ms: u64) -> RateLimit {
        RateLimit {
            requests: self.per_key,
            window_ms: longest_ms.div_ceil(1000).max(1) * 1000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_falls_in_the_class_of_the_next_power_of_two_seconds() {
        for (lifetime_ms, class) in [
            (0, 0),
            (1, 0),
            (1_000, 0),
            (1_001, 1),
            (2_000, 1),
            (3_000, 2),
            (60_000, 6),
            (65_000, 7),
            (600_000, 10),
            (86_405_000, 17),
            (u64::MAX, LIFETIME_CLASSES - 1),
        ] {
            assert_eq!(lifetime_class(lifetime_ms), class, "{lifetime_ms} ms");
            assert!(
                class == LIFETIME_CLASSES - 1 || lifetime_ms <= class_lifetime_ms(class),
                "{lifetime_ms} ms fits its class"
            );
        }
    }

    #[test]
    fn spent_records_take_half_a_store_and_one_key_an_eighth_of_that() {
        for (entries, most, per_key) in [
            // a 32k zone: about a hundred entries
            (100, 50, 6),
            // the default 10m zone: about 40 k
            (40_960, 20_480, 2_560),
            (2, 1, 1),
            (0, 1, 1),
        ] {
            assert_eq!(
                SpentRoom::of_store(entries, 65_000),
                SpentRoom {
                    most,
                    per_key,
                    token_lifetime_ms: 65_000
                },
                "{entries} entries"
            );
        }
    }

    #[test]
    fn a_keys_quota_lasts_as_long_as_its_records_can_live() {
        let room = SpentRoom::of_store(40_960, 65_000);
        assert_eq!(
            room.quota(room.token_lifetime_ms),
            RateLimit {
                requests: 2_560,
                window_ms: 65_000
            }
        );
        assert_eq!(room.quota(1).window_ms, 1_000);
        assert_eq!(room.quota(3_605_000).window_ms, 3_605_000);
    }
}

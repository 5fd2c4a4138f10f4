//! What one worker knows of Redis's data generations (docs/operations.md,
//! "Choosing a fail policy"), and when it asks again: a single Redis has
//! one, read after each handshake and checked at most once a second while
//! challenges are issued; a Redis Cluster has one per slot, which every
//! check's reply carries. The module sends the reads; this decides them.

use crate::cluster::generation::{slot_of_tag, Generations};
use crate::store::Spendable;

/// How often a worker that issues challenges reads the generation again.
pub const CHECK_EVERY_MS: u64 = 1_000;

/// One worker's generations.
#[derive(Clone, Debug)]
pub struct Tracker {
    /// Redis's, once read, and the value of `<prefix>gen` it came from.
    redis: Option<u64>,
    value: Vec<u8>,
    /// A read (or renewal) is on its way.
    asking: bool,
    /// When the generation was last asked for (monotonic ms).
    asked_ms: u64,
    /// This node's own generation (challenges issued during an outage).
    local: u64,
    cluster: bool,
    /// A Redis Cluster: the generation each slot's replies last came with
    /// (0: not known).
    slots: Vec<u64>,
    /// A bit a slot, set where `slots` holds a generation: what every
    /// check reads (2 KB, rather than a line of the 128 KB table; a
    /// generation is known only after a refusal).
    known: Vec<u64>,
}

impl Tracker {
    pub fn new(local: u64, cluster: bool) -> Self {
        Tracker {
            redis: None,
            value: Vec::new(),
            asking: false,
            asked_ms: 0,
            local,
            cluster,
            slots: match cluster {
                true => vec![0; crate::redis::cluster::SLOTS],
                false => Vec::new(),
            },
            known: match cluster {
                true => vec![0; crate::redis::cluster::SLOTS.div_ceil(64)],
                false => Vec::new(),
            },
        }
    }

    /// What the worker knows now (`redis_up`: Redis takes commands).
    pub fn now(&self, redis_up: bool) -> Generations {
        Generations {
            redis: self.redis,
            local: self.local,
            redis_up,
            cluster: self.cluster,
        }
    }

    /// Whether to check the single Redis's generation now (`now_ms`,
    /// monotonic) before issuing a challenge: another node may have
    /// renewed it (a flush). Marks it asked.
    pub fn check_now(&mut self, now_ms: u64) -> bool {
        if self.cluster || self.asking {
            return false;
        }
        if now_ms.saturating_sub(self.asked_ms) < CHECK_EVERY_MS {
            return false;
        }
        self.asked_ms = now_ms;
        true
    }

    /// What the check read (`None`: not a value, e.g. the key is gone):
    /// whether to ask (read or renew) the generation again.
    pub fn checked(&self, value: Option<&[u8]>) -> bool {
        !(self.redis.is_some() && value == Some(self.value.as_slice()))
    }

    /// Whether to ask for (or renew) the generation now: not in a Redis
    /// Cluster, not while a request is on its way. Marks it asking.
    pub fn ask_now(&mut self, now_ms: u64) -> bool {
        if self.cluster || self.asking {
            return false;
        }
        self.asking = true;
        self.asked_ms = now_ms;
        true
    }

    /// The ask's answer: the value of the generation key and the
    /// generation in it (`None`: no answer, nothing learnt).
    pub fn answered(&mut self, learnt: Option<(Vec<u8>, u64)>) {
        self.asking = false;
        if let Some((value, generation)) = learnt {
            self.redis = Some(generation);
            self.value = value;
        }
    }

    /// A spend found the single Redis's generation gone: unknown until
    /// asked again.
    pub fn forget(&mut self) {
        self.redis = None;
    }

    /// Notes the generation a reply gave for `slot` (a Redis Cluster).
    pub fn note_slot(&mut self, slot: u16, generation: Option<u64>) {
        let Some(generation) = generation else {
            return;
        };
        let (word, bit) = known_bit(slot);
        if let (Some(kept), Some(known)) = (
            self.slots.get_mut(usize::from(slot)),
            self.known.get_mut(word),
        ) {
            *kept = generation;
            match generation {
                0 => *known &= !bit,
                _ => *known |= bit,
            }
        }
    }

    /// The generation of `slot` last heard of, if any.
    pub fn slot(&self, slot: u16) -> Option<u64> {
        let (word, bit) = known_bit(slot);
        if self.known.get(word).is_none_or(|known| known & bit == 0) {
            return None;
        }
        self.slots
            .get(usize::from(slot))
            .copied()
            .filter(|generation| *generation != 0)
    }

    /// Whether a solution of a challenge issued in `generation` may be
    /// spent now, for the client whose hash tag is `tag`; and whether to
    /// ask for the generation again (one neither ours nor the one known
    /// may be one another node just renewed).
    ///
    /// In a Redis Cluster, a solution of a generation older than the one
    /// last heard for the client's slot is unpaid from the start (its check
    /// strikes): an old token replayed must not pass as paid to every check
    /// (the spend would refuse it, but after a check that struck nothing).
    /// (Generations grow with Redis's clock: an older one is the token's
    /// age; a newer one is news to this worker, left to the check and the
    /// spend.)
    pub fn accepts(
        &self,
        generation: Option<u64>,
        tag: &[u8],
        redis_up: bool,
    ) -> (Spendable, bool) {
        let now = self.now(redis_up);
        if self.cluster && redis_up {
            if let Some(token) = generation.filter(|g| *g != self.local) {
                if self
                    .slot(slot_of_tag(tag))
                    .is_some_and(|known| token < known)
                {
                    return (Spendable::Stale, false);
                }
            }
        }
        if now.accepts(generation) {
            return (Spendable::Now, false);
        }
        (Spendable::NotNow, redis_up && generation.is_some())
    }
}

/// The word of [`Tracker`]'s `known` that holds `slot`'s bit, and the bit.
fn known_bit(slot: u16) -> (usize, u64) {
    (usize::from(slot / 64), 1 << (slot % 64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_redis_generation_is_checked_once_a_second_and_asked_when_it_changed() {
        let mut t = Tracker::new(5, false);
        assert!(t.check_now(1_000));
        assert!(!t.check_now(1_500), "within a second");
        assert!(t.checked(Some(b"x:9")), "nothing known yet: ask");
        assert!(t.ask_now(1_600));
        assert!(!t.ask_now(1_700), "one ask at a time");
        assert!(!t.check_now(5_000), "no check while asking");
        t.answered(Some((b"x:9".to_vec(), 9)));
        assert_eq!(t.now(true).redis, Some(9));
        assert!(!t.checked(Some(b"x:9")), "the same value");
        assert!(t.checked(Some(b"y:12")), "renewed by another node");
        assert!(t.checked(None), "gone");
        t.forget();
        assert_eq!(t.now(true).redis, None);
        assert!(t.ask_now(2_000));
        t.answered(None);
        assert!(t.ask_now(2_100), "a failed ask may be asked again");
    }

    #[test]
    fn a_redis_cluster_has_no_single_generation_but_one_per_slot() {
        let mut t = Tracker::new(5, true);
        assert!(!t.check_now(10_000));
        assert!(!t.ask_now(10_000));
        let slot = slot_of_tag(b"tag");
        assert_eq!(t.slot(slot), None);
        t.note_slot(slot, Some(20));
        t.note_slot(slot, None);
        assert_eq!(t.slot(slot), Some(20));
        // Each slot its own: the neighbours of a known one are not known;
        // a generation of 0 is none.
        for other in [slot.wrapping_sub(1), slot + 1, 0, 16_383] {
            if other != slot {
                assert_eq!(t.slot(other), None, "{other}");
            }
        }
        t.note_slot(16_383, Some(7));
        assert_eq!(t.slot(16_383), Some(7));
        t.note_slot(16_383, Some(0));
        assert_eq!(t.slot(16_383), None);
        assert_eq!(t.slot(slot), Some(20));
        // Older than the slot's: stale; the node's own: spendable; newer:
        // left to the check and the spend.
        assert_eq!(t.accepts(Some(19), b"tag", true), (Spendable::Stale, false));
        assert_eq!(t.accepts(Some(5), b"tag", true).0, Spendable::Now);
        assert_eq!(t.accepts(Some(21), b"tag", true).0, Spendable::Now);
        // Redis down: Redis's generations cannot be spent.
        assert_eq!(
            t.accepts(Some(19), b"tag", false),
            (Spendable::NotNow, false)
        );
    }

    #[test]
    fn a_generation_not_known_is_not_spent_and_read_again() {
        let mut t = Tracker::new(5, false);
        t.answered(Some((b"x:9".to_vec(), 9)));
        assert_eq!(t.accepts(Some(9), b"k", true), (Spendable::Now, false));
        assert_eq!(t.accepts(Some(5), b"k", false), (Spendable::Now, false));
        assert_eq!(t.accepts(Some(12), b"k", true), (Spendable::NotNow, true));
        assert_eq!(t.accepts(Some(12), b"k", false), (Spendable::NotNow, false));
    }
}

//! Whether a straight request looks for its client's breaker: local mode's
//! breaker table counts the entries ever inserted into it (its
//! generation), and a client's bucket remembers the generation at which
//! its client was last found without a breaker. The straight path declines
//! a client whose breaker is in the table (any entry, whatever its state),
//! and an entry is there only through an insertion: a client found
//! without one at generation `g` has none as long as the generation is
//! still `g` (a breaker removed meanwhile only makes that truer). So while
//! the two agree, the breaker table is not searched, nor the client's key
//! for it made: what every straight request of a zone whose breaker
//! table is not empty (any client struck lately, anywhere) would do.
//!
//! A bucket remembers [`REMEMBERED_BITS`] of the generation (the spare
//! bytes of its tree node): two generations agree there only
//! 2^48 insertions apart, more than a zone makes in years at a million
//! a second, and a client's remembered generation is written again on
//! its first straight request after any insertion, when that request's
//! search finds no breaker (and its bucket key holds the client key: a
//! hashed one is searched by the client key every time). A new bucket remembers
//! 0: the generation of a table that never had an entry.

/// Bits of the breaker table's generation a bucket remembers.
pub const REMEMBERED_BITS: u32 = 48;
const MASK: u64 = (1 << REMEMBERED_BITS) - 1;

/// The breaker table's `generation` as a bucket remembers it.
#[inline(always)]
pub fn remembered(generation: u64) -> u64 {
    generation & MASK
}

/// Whether a straight request must search the breaker table for its
/// client: `breakers` entries in it now, `generation` entries ever
/// inserted, `bucket` what the client's bucket remembers (`None`: no
/// bucket yet). No breaker at all, or a bucket that remembers the
/// generation: no search. (When the search finds none, the bucket is to
/// remember [`remembered`]`(generation)`.)
#[inline(always)]
pub fn must_search(breakers: u64, generation: u64, bucket: Option<u64>) -> bool {
    breakers != 0 && bucket != Some(remembered(generation))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    #[test]
    fn a_bucket_that_remembers_the_generation_skips_the_search() {
        // (breakers, generation, bucket, must search)
        let rows: &[(u64, u64, Option<u64>, bool)] = &[
            // No breaker at all: never.
            (0, 0, None, false),
            (0, 7, None, false),
            (0, 7, Some(3), false),
            // Breakers, no bucket yet: search.
            (1, 1, None, true),
            // Breakers, the bucket remembers an older generation: search.
            (1, 2, Some(1), true),
            (1, 1, Some(0), true),
            // The bucket remembers this generation: none since.
            (1, 2, Some(2), false),
            (500, 9_000, Some(9_000), false),
            // Generations past the remembered bits compare by them.
            (1, (1 << 48) + 5, Some(5), false),
            (1, 1 << 48, Some(MASK), true),
            (1, u64::MAX, Some(MASK), false),
        ];
        for &(breakers, generation, bucket, want) in rows {
            assert_eq!(
                must_search(breakers, generation, bucket),
                want,
                "breakers {breakers}, generation {generation}, bucket {bucket:?}"
            );
        }
    }

    /// The zone's breaker table and buckets as far as the straight path
    /// sees them.
    #[derive(Default)]
    struct Model {
        breakers: HashSet<u8>,
        generation: u64,
        buckets: HashMap<u8, u64>,
    }

    impl Model {
        fn strike(&mut self, client: u8) {
            // An insertion only when the client has no entry yet: strikes
            // on an existing entry (a block beginning) change nothing the
            // straight path reads, and it declines on the entry already.
            if self.breakers.insert(client) {
                self.generation += 1;
            }
        }

        /// Whether the straight path declines `client`, as
        /// `zone::straight_admit` asks it.
        fn declines(&mut self, client: u8) -> bool {
            let bucket = self.buckets.get(&client).copied();
            if must_search(self.breakers.len() as u64, self.generation, bucket) {
                if self.breakers.contains(&client) {
                    return true;
                }
                self.buckets.insert(client, remembered(self.generation));
            } else {
                // (A bucket made now remembers the generation, as
                // `straight_admit` makes it.)
                let now = remembered(self.generation);
                self.buckets.entry(client).or_insert(now);
            }
            false
        }
    }

    #[test]
    fn the_straight_path_declines_exactly_the_clients_with_a_breaker() {
        // Strikes, breakers forgotten, buckets expired and straight
        // requests of four clients in a long pseudo-random order: the
        // answer with the generation is the answer of a search every time.
        let mut model = Model::default();
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..200_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let client = (seed % 4) as u8;
            match (seed >> 8) % 10 {
                0 => model.strike(client),
                1 => {
                    model.breakers.remove(&client);
                }
                2 => {
                    model.buckets.remove(&client);
                }
                _ => {
                    let has_breaker = model.breakers.contains(&client);
                    assert_eq!(model.declines(client), has_breaker, "client {client}");
                }
            }
        }
    }

    #[test]
    fn a_client_struck_after_it_was_remembered_clean_is_searched_again() {
        let mut model = Model::default();
        model.strike(1);
        assert!(!model.declines(2), "client 2 has no breaker");
        assert!(!must_search(
            1,
            model.generation,
            model.buckets.get(&2).copied()
        ));
        model.strike(2);
        assert!(must_search(
            2,
            model.generation,
            model.buckets.get(&2).copied()
        ));
        assert!(model.declines(2), "client 2 struck since");
    }
}

//! Where each limit name's counters sit in the workers' slots, kept in
//! the zone across `nginx -s reload`: a name keeps its place (so its
//! counts) whatever its position in the new configuration, and a new name
//! starts at 0. A configuration's names are placed once, by the master,
//! before its workers start (`place`).

use super::{Slot, LIMIT_NAMES, LIMIT_RESULTS};

/// The name at each place, as the zone holds it (a hash of the name,
/// never 0; 0: a place never taken). Plain integers: zeroed memory is no
/// name placed.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitPlaces {
    names: [u64; LIMIT_NAMES],
}

impl Default for LimitPlaces {
    fn default() -> Self {
        Self::new()
    }
}

/// FNV-1a of the name, never 0 (0 marks a free place).
fn name_hash(name: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h | 1
}

/// Where a configuration's names count: each name's place (in the
/// configuration's order), and the places taken over from names the
/// configuration no longer has, whose counts are to be zeroed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    pub places: Vec<Option<u8>>,
    pub cleared: Vec<usize>,
}

impl LimitPlaces {
    pub const fn new() -> Self {
        LimitPlaces {
            names: [0; LIMIT_NAMES],
        }
    }

    /// Places `names` (a configuration's, in the order first met): a name
    /// placed before keeps its place; a new one takes a place never taken,
    /// else the place of a name `names` does not have (cleared). A name
    /// beyond `LIMIT_NAMES` has none (configuration refuses that many).
    pub fn place(&mut self, names: &[String]) -> Placed {
        let hashes: Vec<u64> = names.iter().map(|n| name_hash(n)).collect();
        let mut places: Vec<Option<u8>> = hashes
            .iter()
            .map(|h| self.names.iter().position(|n| n == h).map(|p| p as u8))
            .collect();
        let mut cleared = Vec::new();
        for (i, &h) in hashes.iter().enumerate() {
            if places[i].is_some() {
                continue;
            }
            let free = self.names.iter().position(|&n| n == 0);
            let gone = || self.names.iter().position(|n| !hashes.contains(n));
            let Some(at) = free.or_else(gone) else {
                continue;
            };
            if self.names[at] != 0 {
                cleared.push(at);
            }
            self.names[at] = h;
            places[i] = Some(at as u8);
        }
        Placed { places, cleared }
    }
}

impl Slot {
    /// Zeroes the counts of the limit name at `place` (taken over by a
    /// new name).
    pub fn clear_limit(&self, place: usize) {
        let first = super::at::LIMIT_REQUESTS + place * LIMIT_RESULTS;
        for c in self.0.iter().skip(first).take(LIMIT_RESULTS) {
            c.store(0, core::sync::atomic::Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_name_keeps_its_place_across_configurations_and_a_new_one_takes_a_free_place() {
        // (configuration's names in order, their places, places cleared)
        let rows: [(&[&str], &[u8], &[usize]); 5] = [
            (&["burst", "hourly"], &[0, 1], &[]),
            // reordered: each keeps its place
            (&["hourly", "burst"], &[1, 0], &[]),
            // renamed: "daily" is new, on a place never taken
            (&["daily", "burst"], &[2, 0], &[]),
            // "hourly" is back: its place kept its counts
            (&["burst", "hourly", "daily"], &[0, 1, 2], &[]),
            (&["burst"], &[0], &[]),
        ];
        let mut zone = LimitPlaces::new();
        for (config, places, cleared) in rows {
            let placed = zone.place(&names(config));
            let got: Vec<u8> = placed.places.iter().map(|p| p.unwrap()).collect();
            assert_eq!(got, places, "{config:?}");
            assert_eq!(placed.cleared, cleared, "{config:?}");
        }
    }

    #[test]
    fn with_every_place_taken_a_new_name_takes_over_a_gone_names_place_zeroed() {
        let mut zone = LimitPlaces::new();
        let all: Vec<String> = (0..LIMIT_NAMES).map(|i| format!("n{i}")).collect();
        zone.place(&all);
        let mut next = all.clone();
        next[3] = "fresh".into();
        let placed = zone.place(&next);
        assert_eq!(placed.places[3], Some(3), "n3's place, the only one gone");
        assert_eq!(placed.cleared, [3]);
        assert_eq!(placed.places[0], Some(0));
        // again: "fresh" now owns it, nothing cleared
        assert_eq!(zone.place(&next).cleared, Vec::<usize>::new());
    }

    #[test]
    fn clearing_a_place_zeroes_its_counts_only() {
        let slot = Slot::default();
        for at in [
            super::super::at::LIMIT_REQUESTS,
            super::super::at::LIMIT_REQUESTS + LIMIT_RESULTS,
        ] {
            slot.add(at, 5);
        }
        slot.clear_limit(1);
        let counts = super::super::Counts::sum([&slot]);
        assert_eq!(counts.get(super::super::at::LIMIT_REQUESTS), 5);
        assert_eq!(
            counts.get(super::super::at::LIMIT_REQUESTS + LIMIT_RESULTS),
            0
        );
    }

    #[test]
    fn a_place_no_name_of_the_configuration_has_is_not_shown() {
        let slot = Slot::default();
        slot.add(super::super::at::LIMIT_REQUESTS + 1, 7);
        let text = super::super::render(&super::super::Snapshot {
            counts: super::super::Counts::sum([&slot]),
            limit_names: vec![String::new(), "burst".into()],
            ..Default::default()
        });
        assert!(
            text.contains("{result=\"challenge\",limit=\"burst\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("{result=\"pass\",limit=\"burst\"} 0\n"),
            "{text}"
        );
        assert!(!text.contains("limit=\"\""), "{text}");
    }
}

//! The maps the node keys by its own numbers (call ids, slots, request
//! numbers), and their hasher.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by the node's numbers (call ids, slots, request numbers):
/// hashed by one multiplication rather than SipHash (measured: a few
/// maps' look-ups a call). A client can choose a slot (by its address or
/// a `key=` value), but the slots are at most 16,384 and a map holds only
/// those with a call in flight: no flood of colliding keys to fear.
pub(super) type Ids<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// [`Ids`]'s hasher: each number mixed in by a multiplication by 2^64/φ,
/// whose high bits depend on every bit of a small number; the hash is
/// that product turned so those bits also come low (the table picks a
/// bucket by the low bits, which in the product alone depend only on the
/// number's own low bits).
#[derive(Default, Clone, Copy)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u16(&mut self, n: u16) {
        self.write_u64(n.into());
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(26) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

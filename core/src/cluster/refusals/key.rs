//! The key of a local refusal: which Redis, limit and counter, and whose
//! ([`refusal_key`]), as the zone and a worker's batches keep it.

use core::borrow::Borrow;
use core::hash::{Hash, Hasher};
use core::ops::Deref;

use crate::limiter::RateLimit;

/// Bytes of a refusal key before the client key ([`refusal_key`]): few
/// enough that the common keys stay inline in a zone entry
/// (`store::INLINE_KEY`, 32 bytes; a longer key is looked up by its
/// SHA-256, ~3,600 instructions): a default IPv4 key (`\0` and up to 15
/// bytes), a default IPv6 key (`\0` and a /64, up to 24 bytes), a `key=`
/// value of `$pow_shield_net` (a /24 or a /48) or a short name.
pub const REFUSAL_PREFIX: usize = 7;

/// The key of a client's refusal under `limit` (zone entry and batch):
/// [`REFUSAL_PREFIX`] bytes that name the Redis it came from (`scope`,
/// [`scope`]), the limit and the counter (exact or approximate), then the
/// client key. Nothing reads them back: the node keeps what a batch needs
/// beside the key.
pub fn refusal_key(scope: u64, limit: RateLimit, approx: bool, key: &[u8]) -> RefusalKey {
    RefusalKey::under(refused_under(scope, limit, approx), (key, &[]))
}

/// [`refusal_key`] of the client key `head` then `tail` (a `key=` value's
/// count: `OWN_KEY` and the value), without making that key.
pub fn refusal_key_of(
    scope: u64,
    limit: RateLimit,
    approx: bool,
    (head, tail): (&[u8], &[u8]),
) -> RefusalKey {
    RefusalKey::under(refused_under(scope, limit, approx), (head, tail))
}

/// The 56 bits before a refusal's client key: the limit and counter
/// written exactly (`limit_bits`), XORed with the low 56 bits of the
/// scope. Under one scope (one configuration's Redis and prefix) that is
/// one-to-one: two limits of a configuration never share a refusal. A
/// refusal from another scope (before a reload to another Redis, database
/// or prefix) is met only if the two scopes differ by exactly what the
/// two limits' bits do: with `n` and `m` limits, a chance of `n·m/2⁵⁶`
/// (the scope is a hash).
fn refused_under(scope: u64, limit: RateLimit, approx: bool) -> u64 {
    (limit_bits(limit, approx) ^ scope) & PREFIX_BITS
}

/// The bits [`REFUSAL_PREFIX`] bytes hold.
const PREFIX_BITS: u64 = (1 << (8 * REFUSAL_PREFIX)) - 1;

/// A limit and its counter in 56 bits, one-to-one for every limit the
/// configuration accepts (`config::values`: whole seconds up to a day,
/// up to a million requests): bit 0 the counter (1: approximate), bit 1
/// clear, bits 2..24 the window in seconds, bits 24..56 the requests.
/// Any other limit (none parses; only a test makes one) sets bit 1 and a
/// hash of its numbers above: never the bits of a parsed limit.
fn limit_bits(limit: RateLimit, approx: bool) -> u64 {
    const WINDOW_BITS: u32 = 22;
    let seconds = limit.window_ms / 1_000;
    let exact = limit.window_ms.is_multiple_of(1_000) && seconds < 1 << WINDOW_BITS;
    let numbers = match exact {
        true => (u64::from(limit.requests) << WINDOW_BITS | seconds) << 2,
        false => mix(mix(limit.window_ms) ^ u64::from(limit.requests)) >> 10 << 2 | 2,
    };
    numbers | u64::from(approx)
}

/// A 64-bit finalizer (one-to-one; every input bit reaches every output
/// bit).
pub(super) fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Longest refusal key kept without an allocation: every request makes
/// a few (to refuse, to take what is pending, its check's group), and
/// the common ones are 17 to 32 bytes.
const KEPT_INLINE: usize = 40;

/// A refusal key ([`refusal_key`]): its bytes, inline up to
/// [`KEPT_INLINE`]. Compares, hashes and borrows as those bytes (a map
/// keyed by it is looked up with a `&[u8]`). Made only here, so an
/// inline key's length is always its bytes'.
#[derive(Clone)]
pub struct RefusalKey(Repr);

#[derive(Clone)]
enum Repr {
    Inline(u8, [u8; KEPT_INLINE]),
    Heap(Box<[u8]>),
}

impl RefusalKey {
    /// The key made of `head` then `tail`.
    fn new(head: &[u8], tail: &[u8]) -> Self {
        let len = head.len() + tail.len();
        let mut bytes = [0; KEPT_INLINE];
        match bytes.get_mut(..len).map(|b| b.split_at_mut(head.len())) {
            Some((h, t)) => {
                h.copy_from_slice(head);
                t.copy_from_slice(tail);
                RefusalKey(Repr::Inline(len as u8, bytes))
            }
            None => RefusalKey(Repr::Heap([head, tail].concat().into_boxed_slice())),
        }
    }

    /// The key of [`REFUSAL_PREFIX`] bytes of `prefix` (little-endian),
    /// then `head` and `tail`. (Inline: every request makes one or two.)
    #[inline(always)]
    fn under(prefix: u64, (head, tail): (&[u8], &[u8])) -> Self {
        let len = REFUSAL_PREFIX + head.len() + tail.len();
        let mut bytes = [0; KEPT_INLINE];
        // The prefix in one word, its eighth byte zero (the client key's
        // first once written).
        if let Some(word) = bytes.first_chunk_mut() {
            *word = (prefix & PREFIX_BITS).to_le_bytes();
        }
        let Some(room) = bytes.get_mut(REFUSAL_PREFIX..len) else {
            let word = prefix.to_le_bytes();
            let before = word.first_chunk::<REFUSAL_PREFIX>().map_or(&[][..], |b| b);
            return RefusalKey(Repr::Heap([before, head, tail].concat().into_boxed_slice()));
        };
        let (h, t) = room.split_at_mut(head.len());
        h.copy_from_slice(head);
        t.copy_from_slice(tail);
        RefusalKey(Repr::Inline(len as u8, bytes))
    }
}

impl From<&[u8]> for RefusalKey {
    fn from(bytes: &[u8]) -> Self {
        RefusalKey::new(bytes, &[])
    }
}

impl Deref for RefusalKey {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline(len, bytes) => bytes.get(..usize::from(*len)).unwrap_or(&[]),
            Repr::Heap(bytes) => bytes,
        }
    }
}

impl Borrow<[u8]> for RefusalKey {
    fn borrow(&self) -> &[u8] {
        self
    }
}

impl AsRef<[u8]> for RefusalKey {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl PartialEq for RefusalKey {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for RefusalKey {}

impl Hash for RefusalKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl core::fmt::Debug for RefusalKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn a_refusal_key_is_its_bytes_inline_or_not() {
        let long = [9u8; 60];
        for len in [0, 1, 7, 32, KEPT_INLINE - 7, KEPT_INLINE - 6, 53] {
            let tail = &long[..len];
            let key = RefusalKey::new(b"1234567", tail);
            let bytes = [&b"1234567"[..], tail].concat();
            assert_eq!(&*key, &bytes[..], "{len}");
            assert_eq!(
                matches!(key.0, Repr::Inline(..)),
                bytes.len() <= KEPT_INLINE
            );
            assert_eq!(key, RefusalKey::from(&bytes[..]));
            // Found in a map by its bytes.
            let map = HashMap::from([(key.clone(), len)]);
            assert_eq!(map.get(&bytes[..]), Some(&len));
        }
    }

    #[test]
    fn a_refusal_key_is_seven_bytes_of_its_limit_and_scope_then_the_key_inline_or_not() {
        let limit = RateLimit {
            requests: 10,
            window_ms: 60_000,
        };
        let scope = 0x0123_4567_89ab_cdef;
        let before = (limit_bits(limit, true) ^ scope).to_le_bytes();
        let long = [b'k'; 60];
        for len in [0, 1, 10, 24, KEPT_INLINE - 7, KEPT_INLINE - 6, 53] {
            let key = &long[..len];
            let bytes = [&before[..REFUSAL_PREFIX], key].concat();
            let made = refusal_key(scope, limit, true, key);
            assert_eq!(&*made, &bytes[..], "{len}");
            assert_eq!(
                matches!(made.0, Repr::Inline(..)),
                bytes.len() <= KEPT_INLINE
            );
            // A `key=` value's, of the key's two halves: the same key.
            let (head, tail) = key.split_at(len / 2);
            assert_eq!(refusal_key_of(scope, limit, true, (head, tail)), made);
        }
    }
}

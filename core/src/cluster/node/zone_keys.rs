//! The zone's keys of the refusals the node looks up, made once each
//! (kept from one operation to the next: a key is a function of its bytes
//! alone, so none goes stale): each limit's refusal is looked up twice a request (to
//! refuse, then to take what is pending) and a refusal longer than an
//! inline key (`refusals::REFUSAL_PREFIX` bytes and a long client key or
//! `key=` value) is a SHA-256. A refusal that fits inline (the common
//! keys) is made afresh: that costs less than finding it here.

use crate::store::{TableKey, INLINE_KEY};

/// Refusals kept.
const KEPT: usize = 4;
/// Longest refusal kept (`refusals::refusal_key`: 7 bytes and the key).
const KEPT_LEN: usize = 64;

/// The keys of the last [`KEPT`] refusals of up to [`KEPT_LEN`] bytes.
pub struct RefusalKeys {
    kept: [(u8, [u8; KEPT_LEN]); KEPT],
    keys: [Option<TableKey>; KEPT],
    next: usize,
}

impl Default for RefusalKeys {
    fn default() -> Self {
        RefusalKeys {
            kept: [(0, [0; KEPT_LEN]); KEPT],
            keys: Default::default(),
            next: 0,
        }
    }
}

impl RefusalKeys {
    /// The zone's key of `refusal` (`TableKey::new(&[refusal])`). (Inline:
    /// an inline key is made where it is asked for, without a call.)
    #[inline]
    pub fn of(&mut self, refusal: &[u8]) -> TableKey {
        match refusal.len() {
            ..=INLINE_KEY => TableKey::new(&[refusal]),
            _ => self.of_long(refusal),
        }
    }

    /// [`RefusalKeys::of`] a refusal longer than an inline key.
    #[inline(never)]
    fn of_long(&mut self, refusal: &[u8]) -> TableKey {
        let len = match u8::try_from(refusal.len()) {
            Ok(len) if refusal.len() <= KEPT_LEN => len,
            _ => return TableKey::new(&[refusal]),
        };
        let found = self
            .kept
            .iter()
            .position(|(n, kept)| *n == len && kept.get(..refusal.len()) == Some(refusal));
        if let Some(key) = found
            .and_then(|i| self.keys.get(i))
            .and_then(Option::as_ref)
        {
            return key.clone();
        }
        let key = TableKey::new(&[refusal]);
        let i = self.next % KEPT;
        if let (Some((n, kept)), Some(slot)) = (self.kept.get_mut(i), self.keys.get_mut(i)) {
            *n = len;
            kept[..refusal.len()].copy_from_slice(refusal);
            *slot = Some(key.clone());
        }
        self.next = self.next.wrapping_add(1);
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusals_key_is_the_zones_key_of_its_bytes_kept_or_not() {
        let long = [7u8; 64];
        let longer = [7u8; 65];
        let cases: &[&[u8]] = &[
            b"",
            b"a",
            &long[..32],
            &long[..33],
            &long,
            &longer,
            b"a",
            &long[..33],
            b"b",
            b"c",
            b"d",
            b"e",
            b"",
            &long[..33],
            &long[..32],
            &longer,
            b"a",
        ];
        let mut keys = RefusalKeys::default();
        for case in cases {
            assert_eq!(keys.of(case), TableKey::new(&[case]), "{case:?}");
        }
    }
}

//! Lists a decided request gives back for the next one's (its client key,
//! its keyed limits): measured, an allocation and a free each a request
//! otherwise. A request decided another way (a failure) drops its own.

use super::keyed::KeyedLimit;

/// Lists kept of each kind at most (a worker's requests in flight at once
/// beyond that allocate theirs).
const KEPT: usize = 16;

/// Lists given back, emptied.
#[derive(Default)]
pub(super) struct Spare {
    keys: Vec<Vec<u8>>,
    limits: Vec<Vec<KeyedLimit>>,
}

impl Spare {
    /// `key`, copied into a list given back if any.
    pub fn key(&mut self, key: &[u8]) -> Vec<u8> {
        let mut kept = self.keys.pop().unwrap_or_default();
        kept.extend_from_slice(key);
        kept
    }

    /// An empty list of keyed limits, given back if any.
    pub fn limits(&mut self) -> Vec<KeyedLimit> {
        self.limits.pop().unwrap_or_default()
    }

    /// A decided request's client key, for a later one.
    pub fn give_key(&mut self, mut key: Vec<u8>) {
        if self.keys.len() < KEPT && key.capacity() > 0 {
            key.clear();
            self.keys.push(key);
        }
    }

    /// A decided request's keyed limits, for a later one.
    pub fn give_limits(&mut self, mut limits: Vec<KeyedLimit>) {
        if self.limits.len() < KEPT && limits.capacity() > 0 {
            limits.clear();
            self.limits.push(limits);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_given_back_serves_the_next_emptied_and_no_more_are_kept() {
        let mut spare = Spare::default();
        let key = spare.key(b"abc");
        assert_eq!(key, b"abc");
        let at = key.as_ptr();
        spare.give_key(key);
        let again = spare.key(b"de");
        assert_eq!((again.as_slice(), again.as_ptr()), (&b"de"[..], at));
        assert!(spare.limits().is_empty());
        for _ in 0..2 * KEPT {
            spare.give_key(b"x".to_vec());
            spare.give_limits(Vec::with_capacity(2));
        }
        assert_eq!((spare.keys.len(), spare.limits.len()), (KEPT, KEPT));
        assert!(spare.limits().is_empty());
        // (An empty list holds nothing worth keeping.)
        let mut spare = Spare::default();
        spare.give_key(Vec::new());
        assert!(spare.keys.is_empty());
    }
}

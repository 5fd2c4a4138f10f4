//! Lists a decided request gives back for the next one's (its client key,
//! its keyed limits, a Redis Cluster request's parts), and the box of its
//! stacked check's part: measured, an allocation and a free each a
//! request otherwise. A request decided another way (a failure) drops its
//! own.

use super::keyed::KeyedLimit;
use super::sharded::KeptPart;
use crate::cluster::calls::Part;

/// Lists kept of each kind at most (a worker's requests in flight at once
/// beyond that allocate theirs).
const KEPT: usize = 16;

/// Lists given back, emptied, by kind.
#[derive(Default)]
pub(super) struct Spare {
    pub keys: Lists<u8>,
    pub limits: Lists<KeyedLimit>,
    pub parts: Lists<KeptPart>,
    /// Boxes of stacked checks' parts, each with the part it held until
    /// the next takes its place. (The boxes are what is kept: their
    /// allocations, not the parts.)
    #[allow(clippy::vec_box)]
    boxes: Vec<Box<Part>>,
}

impl Spare {
    /// `key`, copied into a list given back if any.
    pub fn key(&mut self, key: &[u8]) -> Vec<u8> {
        let mut kept = self.keys.take();
        kept.extend_from_slice(key);
        kept
    }

    /// `part` in a box given back if any.
    pub fn boxed(&mut self, part: Part) -> Box<Part> {
        match self.boxes.pop() {
            Some(mut boxed) => {
                *boxed = part;
                boxed
            }
            None => Box::new(part),
        }
    }

    /// A decided request's box, for a later one's part.
    pub fn give_box(&mut self, boxed: Box<Part>) {
        if self.boxes.len() < KEPT {
            self.boxes.push(boxed);
        }
    }
}

/// Lists of one kind given back, emptied.
pub(super) struct Lists<T>(Vec<Vec<T>>);

impl<T> Default for Lists<T> {
    fn default() -> Self {
        Lists(Vec::new())
    }
}

impl<T> Lists<T> {
    /// An empty list, one given back if any.
    pub fn take(&mut self) -> Vec<T> {
        self.0.pop().unwrap_or_default()
    }

    /// A decided request's list, for a later one (emptied; one that holds
    /// no room is not worth keeping).
    pub fn give(&mut self, mut list: Vec<T>) {
        if self.0.len() < KEPT && list.capacity() > 0 {
            list.clear();
            self.0.push(list);
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
        spare.keys.give(key);
        let again = spare.key(b"de");
        assert_eq!((again.as_slice(), again.as_ptr()), (&b"de"[..], at));
        let mut lists: Lists<u32> = Lists::default();
        assert!(lists.take().is_empty());
        for _ in 0..2 * KEPT {
            lists.give(vec![1, 2]);
        }
        assert_eq!(lists.0.len(), KEPT);
        let list = lists.take();
        assert!(list.is_empty() && list.capacity() >= 2);
        // (An empty list holds nothing worth keeping.)
        let mut lists: Lists<u32> = Lists::default();
        lists.give(Vec::new());
        assert!(lists.0.is_empty());
    }

    #[test]
    fn a_box_given_back_holds_the_next_part_and_no_more_are_kept() {
        use crate::cluster::calls::Part;
        use crate::limiter::breaker::BreakerRules;
        use crate::limiter::RateLimit;
        use crate::store::Offence;
        let part = |tag: &[u8]| {
            let limit = RateLimit {
                requests: 10,
                window_ms: 1_000,
            };
            Part::approx(tag, limit, BreakerRules::default(), Offence::Unpaid)
        };
        let mut spare = Spare::default();
        let first = spare.boxed(part(b"a"));
        let at: *const Part = &*first;
        spare.give_box(first);
        let next = spare.boxed(part(b"b"));
        assert_eq!((&*next.route, &*next as *const Part), (&b"b"[..], at));
        for _ in 0..2 * KEPT {
            spare.give_box(Box::new(part(b"c")));
        }
        assert_eq!(spare.boxes.len(), KEPT);
    }
}

//! Lists a decided request gives back for the next one's (its client key,
//! its keyed limits, a Redis Cluster request's parts), and the box of its
//! stacked check: measured, an allocation and a free each a request
//! otherwise. A request decided another way (a failure) drops its own
//! lists.

use super::check::StackedCheck;
use super::keyed::KeyedLimit;
use super::sharded::KeptPart;

/// Lists kept of each kind at most (a worker's requests in flight at once
/// beyond that allocate theirs).
const KEPT: usize = 16;

/// Lists given back, emptied, by kind.
#[derive(Default)]
pub(super) struct Spare {
    pub keys: Lists<u8>,
    pub limits: Lists<KeyedLimit>,
    pub parts: Lists<KeptPart>,
    /// Boxes of decided requests' stacked checks, emptied, each made
    /// again in place for the next (their allocations and their lists'
    /// are what is kept).
    #[allow(clippy::vec_box)]
    boxes: Vec<Box<StackedCheck>>,
}

impl Spare {
    /// `key`, copied into a list given back if any.
    pub fn key(&mut self, key: &[u8]) -> Vec<u8> {
        let mut kept = self.keys.take();
        kept.extend_from_slice(key);
        kept
    }

    /// A stacked check to make in place: one given back if any (its
    /// lists empty, its part the last one's, to be made again).
    pub fn stacked(&mut self) -> Box<StackedCheck> {
        self.boxes.pop().unwrap_or_default()
    }

    /// A decided request's stacked check, for a later one.
    pub fn give_stacked(&mut self, mut c: Box<StackedCheck>) {
        if self.boxes.len() < KEPT {
            c.clear();
            self.boxes.push(c);
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
    fn a_stacked_check_given_back_serves_the_next_emptied_and_no_more_are_kept() {
        let mut spare = Spare::default();
        let mut first = spare.stacked();
        first.key.extend_from_slice(b"abc");
        let at: *const StackedCheck = &*first;
        let key_at = first.key.as_ptr();
        spare.give_stacked(first);
        let next = spare.stacked();
        assert_eq!(
            (&*next as *const StackedCheck, next.key.as_ptr()),
            (at, key_at)
        );
        assert!(next.key.is_empty() && next.limits.is_empty());
        for _ in 0..2 * KEPT {
            spare.give_stacked(Box::default());
        }
        assert_eq!(spare.boxes.len(), KEPT);
    }
}

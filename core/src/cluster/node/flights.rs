//! The calls on their way, each at a place its id names: measured, a
//! hash map's insert and remove cost some 100 instructions a call more.

use super::CallId;

/// An id's bits that name its place; above them, how many calls the place
/// held before (so that a reply to an earlier one finds nothing).
const PLACE_BITS: u32 = 32;
const PLACE: u64 = (1 << PLACE_BITS) - 1;

/// Flights by [`CallId`].
pub(super) struct Flights<F> {
    /// Each place: the id of its last call, and its flight while that call
    /// is on its way.
    places: Vec<(u64, Option<F>)>,
    /// Places whose call ended.
    free: Vec<usize>,
    len: usize,
}

impl<F> Default for Flights<F> {
    fn default() -> Self {
        Flights {
            places: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<F> Flights<F> {
    /// Keeps `flight` on its way: the id its reply comes with.
    #[inline]
    pub fn insert(&mut self, flight: F) -> CallId {
        self.len += 1;
        if let Some((id, place)) = self.free.pop().and_then(|at| self.places.get_mut(at)) {
            *id = id.wrapping_add(1 << PLACE_BITS);
            *place = Some(flight);
            return CallId(*id);
        }
        let id = self.places.len() as u64;
        self.places.push((id, Some(flight)));
        CallId(id)
    }

    /// The flight of call `id`, no longer on its way (none: it ended, or
    /// never was).
    #[inline]
    pub fn remove(&mut self, id: CallId) -> Option<F> {
        let at = usize::try_from(id.0 & PLACE).ok()?;
        let (last, place) = self.places.get_mut(at)?;
        if *last != id.0 {
            return None;
        }
        let flight = place.take()?;
        self.free.push(at);
        self.len -= 1;
        Some(flight)
    }

    /// Calls on their way.
    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flight_is_found_once_by_its_id_and_a_place_reused_names_another() {
        let mut flights = Flights::default();
        let (a, b) = (flights.insert('a'), flights.insert('b'));
        assert_ne!(a, b);
        assert_eq!(flights.len(), 2);
        assert_eq!(flights.remove(a), Some('a'));
        assert_eq!(flights.remove(a), None);
        // A's place again, under another id: a late reply to `a` finds
        // nothing.
        let c = flights.insert('c');
        assert_ne!(c, a);
        assert_eq!(c.0 & PLACE, a.0 & PLACE);
        assert_eq!(flights.remove(a), None);
        assert_eq!(flights.len(), 2);
        assert_eq!(flights.remove(CallId(99)), None);
        assert_eq!(flights.remove(CallId(u64::MAX)), None);
        assert_eq!(
            (flights.remove(b), flights.remove(c)),
            (Some('b'), Some('c'))
        );
        assert_eq!(flights.len(), 0);
        let ids: Vec<_> = ('d'..='z').map(|f| (f, flights.insert(f))).collect();
        for (f, id) in ids.into_iter().rev() {
            assert_eq!(flights.remove(id), Some(f));
        }
        assert_eq!(flights.len(), 0);
    }
}

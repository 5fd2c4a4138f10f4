//! When a connection's one deadline timer must move: nginx keeps a timer
//! by the time it fires (a key of the wrapping millisecond clock), and a
//! new command's deadline moves it only when it is sooner than the one
//! set (a timer set sooner fires, finds nothing due yet, and is set again
//! for the oldest reply's deadline).

/// Whether a timer set to fire at `set` fires by `due` already (the same
/// time or sooner; keys wrap, as nginx compares them).
pub fn fires_by(set: usize, due: usize) -> bool {
    due.wrapping_sub(set) as isize >= 0
}

#[cfg(test)]
mod tests {
    use super::fires_by;

    #[test]
    fn a_timer_set_sooner_or_at_the_deadline_is_kept_a_later_one_moves() {
        assert!(fires_by(100, 100));
        assert!(fires_by(100, 101));
        assert!(!fires_by(101, 100));
        // Across the clock's wrap.
        assert!(fires_by(usize::MAX, 2));
        assert!(!fires_by(2, usize::MAX));
    }
}

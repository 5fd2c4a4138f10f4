//! When a Redis Cluster tries again (pure, unit-tested): commands a node
//! answered `TRYAGAIN` wait in a capped queue for their turn, and the slot
//! map is asked for again with back-off while it does not change. Times
//! are nginx's millisecond clock (`ngx_msec_t`, a `usize`), which wraps:
//! they are compared by their signed difference, never by `<`.

use std::collections::VecDeque;

/// Map refresh back-off while nothing changes (a master down): first wait,
/// and the ceiling it doubles up to.
pub const REFRESH_FIRST_MS: usize = 100;
pub const REFRESH_MAX_MS: usize = 2_000;

/// Whether `deadline` has passed by `at`.
pub fn past(deadline: usize, at: usize) -> bool {
    (at.wrapping_sub(deadline) as isize) > 0
}

/// Commands waiting to be sent again, in the order they are due (each
/// waits the same delay, so the queue is sorted by due time).
pub struct Retries<T> {
    queue: VecDeque<(usize, T)>,
    cap: usize,
}

impl<T> Retries<T> {
    pub fn new(cap: usize) -> Self {
        Retries {
            queue: VecDeque::new(),
            cap,
        }
    }

    /// Queues `job`, due at `due`; gives it back if `cap` jobs wait already.
    pub fn push(&mut self, due: usize, job: T) -> Result<(), T> {
        if self.queue.len() >= self.cap {
            return Err(job);
        }
        self.queue.push_back((due, job));
        Ok(())
    }

    /// Takes the jobs due at `now`, oldest first, and says in how many
    /// milliseconds the next one is due (none left: `None`).
    pub fn take_due(&mut self, now: usize) -> (Vec<T>, Option<usize>) {
        let mut due = Vec::new();
        while let Some((at, _)) = self.queue.front() {
            if (now.wrapping_sub(*at) as isize) < 0 {
                return (due, Some(at.wrapping_sub(now)));
            }
            if let Some((_, job)) = self.queue.pop_front() {
                due.push(job);
            }
        }
        (due, None)
    }

    /// Every job still waiting (the worker exits).
    pub fn drain(&mut self) -> Vec<T> {
        self.queue.drain(..).map(|(_, job)| job).collect()
    }
}

/// How long to wait before asking for the slot map again: at once (1 ms,
/// the default, for a map that just changed), then doubling from
/// `REFRESH_FIRST_MS` up to `REFRESH_MAX_MS` while it does not change.
#[derive(Clone, Copy)]
pub struct RefreshBackoff {
    ms: usize,
}

impl Default for RefreshBackoff {
    fn default() -> Self {
        RefreshBackoff { ms: 1 }
    }
}

impl RefreshBackoff {
    pub fn ms(&self) -> usize {
        self.ms
    }

    /// Nothing changed (or nobody answered): wait longer.
    pub fn grow(&mut self) {
        self.ms = (self.ms * 2).clamp(REFRESH_FIRST_MS, REFRESH_MAX_MS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_is_past_only_after_it() {
        assert!(!past(1_000, 999));
        assert!(!past(1_000, 1_000));
        assert!(past(1_000, 1_001));
    }

    #[test]
    fn a_deadline_is_compared_across_the_clock_wrapping() {
        let deadline = usize::MAX - 5;
        assert!(!past(deadline, usize::MAX - 10));
        assert!(past(deadline, 3));
        assert!(!past(3, deadline));
    }

    #[test]
    fn jobs_are_taken_when_due_in_order() {
        let mut retries = Retries::new(8);
        assert!(retries.push(100, "a").is_ok());
        assert!(retries.push(100, "b").is_ok());
        assert!(retries.push(120, "c").is_ok());
        assert_eq!(retries.take_due(99), (vec![], Some(1)));
        assert_eq!(retries.take_due(100), (vec!["a", "b"], Some(20)));
        assert_eq!(retries.take_due(130), (vec!["c"], None));
        assert_eq!(retries.take_due(200), (vec![], None));
    }

    #[test]
    fn jobs_due_across_the_clock_wrapping_wait_for_it() {
        let mut retries = Retries::new(8);
        let due = 10usize.wrapping_sub(20);
        assert!(retries.push(due, 1).is_ok());
        assert!(retries.push(10, 2).is_ok());
        assert_eq!(retries.take_due(due.wrapping_sub(5)), (vec![], Some(5)));
        assert_eq!(retries.take_due(0), (vec![1], Some(10)));
        assert_eq!(retries.take_due(10), (vec![2], None));
    }

    #[test]
    fn a_full_queue_gives_the_job_back() {
        let mut retries = Retries::new(2);
        assert!(retries.push(1, 'a').is_ok());
        assert!(retries.push(1, 'b').is_ok());
        assert_eq!(retries.push(1, 'c'), Err('c'));
        assert_eq!(retries.take_due(1).0, vec!['a', 'b']);
        assert!(retries.push(2, 'c').is_ok());
    }

    #[test]
    fn drain_takes_every_waiting_job() {
        let mut retries = Retries::new(4);
        assert!(retries.push(5, 1).is_ok());
        assert!(retries.push(50, 2).is_ok());
        assert_eq!(retries.drain(), vec![1, 2]);
        assert_eq!(retries.take_due(usize::MAX / 2), (vec![], None));
    }

    #[test]
    fn the_map_is_asked_at_once_then_every_100_ms_doubling_up_to_2_s() {
        let mut backoff = RefreshBackoff::default();
        assert_eq!(backoff.ms(), 1);
        let mut waits = Vec::new();
        for _ in 0..7 {
            backoff.grow();
            waits.push(backoff.ms());
        }
        assert_eq!(waits, [100, 200, 400, 800, 1_600, 2_000, 2_000]);
    }
}

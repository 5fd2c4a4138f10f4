//! Tokens Redis could not record as spent (pure, unit-tested). The request
//! was decided by `pow_shield_fail`; under `local` the node's replay cache
//! spent the token. They are written to Redis once it answers again, so a
//! token spent during an outage stays refused on every node (docs/operations.md, "Choosing a fail policy").

use std::collections::{HashSet, VecDeque};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replay {
    pub digest: [u8; 32],
    /// The spent record's Redis key.
    pub key: String,
    /// The hash tag of the client that spent it (`command::client_tag`):
    /// its breaker's keys, where the write takes back the 429's strike.
    pub tag: String,
    pub expires_at_ms: u64,
    queued_at_ms: u64,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Queued {
    Yes,
    /// The queue is full; `first` when this starts an episode (log it once).
    Dropped {
        first: bool,
    },
}

pub struct Replays {
    queue: VecDeque<Replay>,
    /// The digests in `queue`: a token waits once, however often it is
    /// replayed or raced while Redis is away (each try would queue it).
    waiting: HashSet<[u8; 32]>,
    cap: usize,
    dropped: u64,
    full: bool,
    /// No pass before this (milliseconds): one per clock tick, and a pause
    /// after a write was refused.
    next_pass_ms: u64,
}

/// After a refused write (the token's node is down, others may be up: a
/// cluster in a partial outage), the queue waits this long: requests meet
/// it on every call, and a pass costs a sweep of the queue.
pub const HOLD_MS: u64 = 100;

impl Replays {
    pub fn new(cap: usize) -> Self {
        Self {
            queue: VecDeque::new(),
            waiting: HashSet::new(),
            cap,
            dropped: 0,
            full: false,
            next_pass_ms: 0,
        }
    }

    /// Whether to look for due tokens now: at most once per millisecond,
    /// and not while held (see `hold`).
    pub fn pass_now(&mut self, now_ms: u64) -> bool {
        // (A wall clock stepped back by more than a hold restarts passes.)
        let wait = self.next_pass_ms.saturating_sub(now_ms);
        if self.queue.is_empty() || (1..=HOLD_MS).contains(&wait) {
            return false;
        }
        self.next_pass_ms = now_ms + 1;
        true
    }

    /// A write of this pass was refused: no pass for `HOLD_MS`.
    pub fn hold(&mut self, now_ms: u64) {
        self.next_pass_ms = now_ms + HOLD_MS;
    }

    pub fn push(
        &mut self,
        digest: &[u8; 32],
        key: String,
        tag: String,
        expires_at_ms: u64,
        now_ms: u64,
    ) -> Queued {
        if self.waiting.contains(digest) {
            return Queued::Yes;
        }
        if self.queue.len() >= self.cap {
            self.dropped += 1;
            let first = !self.full;
            self.full = true;
            return Queued::Dropped { first };
        }
        self.waiting.insert(*digest);
        self.queue.push_back(Replay {
            digest: *digest,
            key,
            tag,
            expires_at_ms,
            queued_at_ms: now_ms,
        });
        Queued::Yes
    }

    /// Up to `most` tokens to write now, unexpired ones first queued (a
    /// batch, so that the writes never crowd out requests' commands). Those
    /// queued at `now_ms` wait: the request that failed may not have been
    /// decided by the fallback yet (it runs from a posted event of this
    /// iteration).
    pub fn take_due(&mut self, now_ms: u64, most: usize) -> Vec<Replay> {
        let mut due = Vec::new();
        let waiting = &mut self.waiting;
        self.queue.retain(|r| {
            if r.expires_at_ms <= now_ms {
                waiting.remove(&r.digest);
                return false;
            }
            if r.queued_at_ms < now_ms && due.len() < most {
                waiting.remove(&r.digest);
                due.push(r.clone());
                return false;
            }
            true
        });
        if self.queue.len() < self.cap {
            self.full = false;
        }
        due
    }

    /// No spend queued.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Tokens dropped because the queue was full, since the worker started.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: [u8; 32] = [7; 32];

    #[test]
    fn tokens_queued_earlier_are_due() {
        let mut r = Replays::new(4);
        assert_eq!(
            r.push(&D, String::new(), String::new(), 1000, 10),
            Queued::Yes
        );
        assert_eq!(r.take_due(11, 64).len(), 1);
        assert!(r.is_empty());
    }

    #[test]
    fn tokens_queued_in_this_iteration_wait() {
        let mut r = Replays::new(4);
        r.push(&D, String::new(), String::new(), 1000, 10);
        assert!(r.take_due(10, 64).is_empty());
        assert!(!r.is_empty());
    }

    #[test]
    fn expired_tokens_are_skipped() {
        let mut r = Replays::new(4);
        r.push(&D, String::new(), String::new(), 20, 10);
        assert!(r.take_due(20, 64).is_empty());
        assert!(r.is_empty());
    }

    #[test]
    fn beyond_the_cap_tokens_are_dropped_counted_and_logged_once() {
        let mut r = Replays::new(1);
        assert_eq!(
            r.push(&D, String::new(), String::new(), 1000, 0),
            Queued::Yes
        );
        assert_eq!(
            r.push(&[8; 32], String::new(), String::new(), 1000, 0),
            Queued::Dropped { first: true }
        );
        assert_eq!(
            r.push(&[9; 32], String::new(), String::new(), 1000, 0),
            Queued::Dropped { first: false }
        );
        assert_eq!(r.dropped(), 2);
        r.take_due(1, 64);
        assert_eq!(
            r.push(&D, String::new(), String::new(), 1000, 1),
            Queued::Yes
        );
        assert_eq!(
            r.push(&[8; 32], String::new(), String::new(), 1000, 1),
            Queued::Dropped { first: true }
        );
    }

    #[test]
    fn a_token_tried_again_while_it_waits_takes_no_second_place() {
        let mut r = Replays::new(2);
        for _ in 0..5 {
            assert_eq!(
                r.push(&D, String::new(), String::new(), 1000, 0),
                Queued::Yes
            );
        }
        assert_eq!(
            r.push(&[8; 32], String::new(), String::new(), 1000, 0),
            Queued::Yes
        );
        assert_eq!(r.dropped(), 0);
        assert_eq!(r.take_due(1, 64).len(), 2);
        // Taken out to be written: a failed write queues it again.
        assert_eq!(
            r.push(&D, String::new(), String::new(), 1000, 1),
            Queued::Yes
        );
        assert_eq!(r.take_due(2, 64).len(), 1);
    }

    #[test]
    fn an_expired_token_leaves_its_place() {
        let mut r = Replays::new(1);
        r.push(&D, String::new(), String::new(), 20, 10);
        assert!(r.take_due(20, 64).is_empty());
        assert_eq!(
            r.push(&D, String::new(), String::new(), 1000, 20),
            Queued::Yes
        );
        assert!(!r.is_empty());
    }

    #[test]
    fn a_pass_runs_at_most_once_per_millisecond() {
        let mut r = Replays::new(4);
        assert!(!r.pass_now(10), "nothing queued");
        r.push(&D, String::new(), String::new(), 1000, 10);
        assert!(r.pass_now(11));
        assert!(!r.pass_now(11), "same tick");
        assert!(r.pass_now(12));
    }

    #[test]
    fn a_refused_write_holds_the_queue() {
        let mut r = Replays::new(4);
        r.push(&D, String::new(), String::new(), 10_000, 10);
        assert!(r.pass_now(11));
        r.hold(11);
        assert!((12..11 + HOLD_MS).all(|now| !r.pass_now(now)));
        assert!(r.pass_now(11 + HOLD_MS));
    }

    #[test]
    fn a_clock_stepped_back_does_not_stop_passes() {
        let mut r = Replays::new(4);
        r.push(&D, String::new(), String::new(), 1_000_000, 10);
        assert!(r.pass_now(100_000));
        assert!(r.pass_now(50_000));
    }

    #[test]
    fn writes_go_in_batches_oldest_first() {
        let mut r = Replays::new(100);
        for n in 0..10u8 {
            r.push(&[n; 32], String::new(), String::new(), 1_000, u64::from(n));
        }
        let first = r.take_due(50, 4);
        assert_eq!(
            first.iter().map(|x| x.digest[0]).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(r.take_due(50, 4).len(), 4);
        assert_eq!(r.take_due(50, 4).len(), 2);
        assert!(r.is_empty());
    }
}

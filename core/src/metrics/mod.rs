//! Metrics (docs/metrics.md) without nginx: the counters one worker
//! keeps, what a request, a Redis command or an error adds to them, and the
//! Prometheus text the status location serves.
//!
//! Every worker counts into its own cache-line-aligned [`Slot`] of atomics
//! in the shared zone (no lock, `Relaxed` adds); the status location sums
//! the slots. Counting is on only where a `pow_shield_status` location is
//! configured: otherwise no slot is attached and every call here returns
//! after one read of a thread-local (an nginx worker is one thread).

mod bots;
mod places;
mod render;

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::Instant;

pub use self::bots::{render_bots, BotCounters, BOT_NAMES};
pub use self::places::{LimitPlaces, Placed};
pub use self::render::{render, Snapshot, ZoneStats, CONTENT_TYPE};
use crate::decision::{Final, Outcome};
use crate::limiter::breaker::Tripped;

/// `result` label values of `pow_shield_requests_total`, in slot order.
pub const RESULTS: [&str; 9] = [
    "pass",
    "challenge",
    "solved",
    "invalid",
    "blocked",
    "banned",
    "trap",
    "exempt",
    "unavailable",
];

/// Distinct limit names (`limit` label values) one configuration may have.
pub const LIMIT_NAMES: usize = 16;

/// The results a limit decides, which `pow_shield_requests_total` counts
/// by `limit` where the limits are named or stacked (the first four of
/// [`RESULTS`]).
pub const LIMIT_RESULTS: usize = 4;

/// `reason` label values of `pow_shield_verifications_failed_total`: the
/// rows of docs/protocol.md §7.2 (`Rejection::reason`, then the replay
/// store's "spent").
pub const FAILURE_REASONS: [&str; 8] = [
    "malformed",
    "signature",
    "payload",
    "ip",
    "binding",
    "expired",
    "solution",
    "spent",
];

/// `kind` label values of `pow_shield_redis_errors_total`, in slot order.
pub const REDIS_ERROR_KINDS: [&str; 6] =
    ["io", "timeout", "protocol", "handshake", "reply", "refused"];

/// `table` label values of the zone's families.
pub const TABLES: [&str; 3] = ["buckets", "spent", "strikes"];

/// Upper bounds of the round-trip histogram's finite buckets: the text of
/// the `le` label and the same bound in nanoseconds.
pub const RTT_BUCKETS: [(&str, u64); 13] = [
    ("0.0001", 100_000),
    ("0.00025", 250_000),
    ("0.0005", 500_000),
    ("0.001", 1_000_000),
    ("0.0025", 2_500_000),
    ("0.005", 5_000_000),
    ("0.01", 10_000_000),
    ("0.025", 25_000_000),
    ("0.05", 50_000_000),
    ("0.1", 100_000_000),
    ("0.25", 250_000_000),
    ("0.5", 500_000_000),
    ("1", 1_000_000_000),
];

/// Where each counter sits in a slot.
pub mod at {
    use super::{FAILURE_REASONS, REDIS_ERROR_KINDS, RESULTS};

    pub const REQUESTS: usize = 0;
    pub const CHALLENGES: usize = REQUESTS + RESULTS.len();
    pub const FAILED: usize = CHALLENGES + 1;
    pub const STRIKES: usize = FAILED + FAILURE_REASONS.len();
    pub const TRIPS: usize = STRIKES + 1;
    pub const BANS: usize = TRIPS + 1;
    pub const TRAP_HITS: usize = BANS + 1;
    pub const REDIS_COMMANDS: usize = TRAP_HITS + 1;
    pub const REDIS_ERRORS: usize = REDIS_COMMANDS + 1;
    pub const REDIS_RECONNECTS: usize = REDIS_ERRORS + REDIS_ERROR_KINDS.len();
    pub const REDIS_REPLAYS_DROPPED: usize = REDIS_RECONNECTS + 1;
    /// A gauge: +1 when a worker starts deciding without Redis, -1 when it
    /// stops (wrapping; the sum over slots is the number of such workers).
    pub const REDIS_FALLBACK: usize = REDIS_REPLAYS_DROPPED + 1;
    /// Per-bucket (not cumulative) counts; the last is `+Inf`.
    pub const RTT_BUCKETS: usize = REDIS_FALLBACK + 1;
    pub const RTT_SUM_NS: usize = RTT_BUCKETS + RTT_BUCKETS_LEN;
    /// Not a counter: the pid of the worker that took the slot last.
    pub const OWNER: usize = RTT_SUM_NS + 1;
    /// Requests by limit name and result (`LIMIT_RESULTS` per name).
    pub const LIMIT_REQUESTS: usize = OWNER + 1;
    pub const LEN: usize = LIMIT_REQUESTS + super::LIMIT_NAMES * super::LIMIT_RESULTS;

    pub const RTT_BUCKETS_LEN: usize = super::RTT_BUCKETS.len() + 1;
}

/// Worker slots in the zone. More workers share slots (`ngx_worker` modulo
/// this): the adds are atomic, so sharing costs contention, never counts.
pub const SLOTS: usize = 32;

/// One worker's counters, alone on its cache lines so that workers never
/// write the same line.
#[repr(C, align(64))]
pub struct Slot([AtomicU64; at::LEN]);

/// The slots of every worker, as the zone holds them.
pub type Slots = [Slot; SLOTS];

// A slot is a whole number of cache lines; all of them fit in seven pages.
const _: () = assert!(core::mem::size_of::<Slot>().is_multiple_of(64));
const _: () = assert!(core::mem::size_of::<Slots>() <= 7 * 4096);

impl Default for Slot {
    /// A slot of zero counters (the zone's slots are zeroed memory instead).
    fn default() -> Self {
        Slot([const { AtomicU64::new(0) }; at::LEN])
    }
}

impl Slot {
    fn add(&self, at: usize, n: u64) {
        if let Some(c) = self.0.get(at) {
            c.fetch_add(n, Relaxed);
        }
    }

    /// Counts what a decided request did (`record` below).
    pub fn count_request(&self, r: &Decided) {
        for at in r.counters() {
            self.add(at, 1);
        }
    }

    /// One Redis round trip of `ns` nanoseconds.
    pub fn observe_rtt(&self, ns: u64) {
        self.add(at::RTT_BUCKETS + rtt_bucket(ns), 1);
        self.add(at::RTT_SUM_NS, ns);
    }

    /// This worker started (`true`) or stopped deciding without Redis.
    pub fn fallback(&self, active: bool) {
        let delta = if active { 1 } else { u64::MAX }; // -1, wrapping
        self.add(at::REDIS_FALLBACK, delta);
    }

    /// Worker `pid` takes the slot. If the worker before it is gone (it
    /// died: nginx started this one in its place), its part of the
    /// fallback gauge goes with it: its -1 will never come. A previous
    /// owner still alive (a reload's old worker finishing its requests)
    /// keeps its part, and takes it back itself as it exits.
    pub fn adopt(&self, pid: u32, alive: impl FnOnce(u32) -> bool) {
        let Some(owner) = self.0.get(at::OWNER) else {
            return;
        };
        let before = owner.swap(u64::from(pid), Relaxed);
        let gone = before != 0 && before != u64::from(pid) && !alive(before as u32);
        if gone {
            if let Some(gauge) = self.0.get(at::REDIS_FALLBACK) {
                gauge.store(0, Relaxed);
            }
        }
    }
}

/// The sum of every slot: plain numbers, in slot order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counts(pub [u64; at::LEN]);

impl Default for Counts {
    fn default() -> Self {
        Counts([0; at::LEN])
    }
}

impl Counts {
    /// Sums the slots' counters, not their owners (wrapping: the fallback
    /// gauge's -1s cancel +1s).
    pub fn sum<'a>(slots: impl IntoIterator<Item = &'a Slot>) -> Self {
        let mut total = Counts::default();
        for slot in slots {
            let counters = total.0.iter_mut().zip(slot.0.iter()).enumerate();
            for (_, (t, c)) in counters.filter(|(i, _)| *i != at::OWNER) {
                *t = t.wrapping_add(c.load(Relaxed));
            }
        }
        total
    }

    fn get(&self, at: usize) -> u64 {
        self.0.get(at).copied().unwrap_or(0)
    }
}

/// The histogram bucket of a round trip: the first bound it does not
/// exceed (`le` is inclusive), else `+Inf`.
pub fn rtt_bucket(ns: u64) -> usize {
    RTT_BUCKETS
        .iter()
        .position(|&(_, bound)| ns <= bound)
        .unwrap_or(RTT_BUCKETS.len())
}

fn result_index(outcome: Outcome) -> usize {
    match outcome {
        Outcome::Pass => 0,
        Outcome::Challenge => 1,
        Outcome::Solved => 2,
        Outcome::Invalid => 3,
        Outcome::Blocked => 4,
        Outcome::Banned => 5,
        Outcome::Trap => 6,
        Outcome::Exempt => 7,
        Outcome::Unavailable => 8,
    }
}

/// What one shielded request did, as its decision ended.
#[derive(Clone, Copy, Debug)]
pub struct Decided {
    pub end: Final,
    /// The request was sent to a `pow_shield_trap` location.
    pub trap: bool,
    /// A store recorded a strike for it.
    pub struck: bool,
    /// What its strike set off, if anything.
    pub tripped: Option<Tripped>,
    /// The place of the name of the limit that decided it (`LimitPlaces`),
    /// where the limits are named or stacked.
    pub limit: Option<u8>,
}

impl Decided {
    /// A decision as the store reported it: its strike, what it set off.
    pub fn new(end: Final, trap: bool) -> Self {
        Decided {
            end,
            trap,
            struck: end.struck,
            tripped: end.breaker.and_then(|s| s.tripped),
            limit: None,
        }
    }

    /// Counted by `limit` too (`Decided::limit`).
    pub fn by_limit(mut self, limit: Option<u8>) -> Self {
        self.limit = limit;
        self
    }

    /// The counters this request adds one to.
    pub fn counters(&self) -> impl Iterator<Item = usize> {
        let end = self.end;
        let result = result_index(end.outcome);
        let request = match self.limit {
            Some(name) if result < LIMIT_RESULTS && usize::from(name) < LIMIT_NAMES => {
                at::LIMIT_REQUESTS + usize::from(name) * LIMIT_RESULTS + result
            }
            _ => at::REQUESTS + result,
        };
        let challenge = matches!(end.answer, Some(crate::decision::Answer::Challenge { .. }))
            .then_some(at::CHALLENGES);
        let failed = (end.outcome == Outcome::Invalid)
            .then(|| FAILURE_REASONS.iter().position(|&r| r == end.reason))
            .flatten()
            .map(|i| at::FAILED + i);
        let trips = self.tripped.map(|_| at::TRIPS);
        let bans = matches!(self.tripped, Some(Tripped::Banned)).then_some(at::BANS);
        [
            Some(request),
            challenge,
            failed,
            self.struck.then_some(at::STRIKES),
            trips,
            bans,
            self.trap.then_some(at::TRAP_HITS),
        ]
        .into_iter()
        .flatten()
    }
}

/* this worker's slot */

/// This worker's slot, when counting is on: set once, when the worker
/// starts (nginx's workers are processes of one thread, each with its own
/// copy), and read by every request with one load, not a thread-local
/// lookup.
static WORKER: OnceLock<&'static Slot> = OnceLock::new();

/// Counting starts: `slot` is this worker's, in shared memory mapped for
/// the life of the process. (Once per process: a later call keeps the
/// first slot.)
pub fn attach(slot: &'static Slot) {
    let _ = WORKER.set(slot);
}

/// The worker's slot, if counting is on.
#[inline]
pub fn worker() -> Option<&'static Slot> {
    WORKER.get().copied()
}

/// A shielded request's decision ended: what it was is made only when
/// this worker counts (a `pow_shield_status` location exists). (Inline:
/// where nothing counts, the decision's closure is never made.)
#[inline(always)]
pub fn request(decided: impl FnOnce() -> Decided) {
    if let Some(slot) = worker() {
        slot.count_request(&decided());
    }
}

/// Why Redis failed, as `pow_shield_redis_errors_total{kind}` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisError {
    /// connect, send or recv failed, or Redis closed a busy connection.
    Io,
    /// No reply (or no handshake answer) within the timeout.
    Timeout,
    /// An unreadable, oversized or unexpected reply.
    Protocol,
    /// Redis refused a handshake step (AUTH, SELECT, SCRIPT LOAD).
    Handshake,
    /// An error reply to a request's command (WRONGTYPE, OOM...).
    Reply,
    /// Refused at once: too many commands in flight.
    Refused,
}

/// When a command was written, to time its reply; `None` while counting
/// is off (the clock is not read then).
#[derive(Clone, Copy, Debug, Default)]
pub struct Sent(Option<Instant>);

/// A command was queued for Redis.
pub fn redis_command() -> Sent {
    match worker() {
        Some(slot) => {
            slot.add(at::REDIS_COMMANDS, 1);
            Sent(Some(Instant::now()))
        }
        None => Sent(None),
    }
}

/// The reply to a command sent at `sent` arrived (an error reply too).
pub fn redis_reply(sent: Sent) {
    if let (Some(slot), Some(at)) = (worker(), sent.0) {
        let ns = u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX);
        slot.observe_rtt(ns);
    }
}

pub fn redis_error(kind: RedisError) {
    if let Some(slot) = worker() {
        slot.add(at::REDIS_ERRORS + kind as usize, 1);
    }
}

/// The connection to Redis works again after a failure.
pub fn redis_reconnected() {
    if let Some(slot) = worker() {
        slot.add(at::REDIS_RECONNECTS, 1);
    }
}

/// A token spent during an outage was dropped from the replay queue.
pub fn redis_replay_dropped() {
    if let Some(slot) = worker() {
        slot.add(at::REDIS_REPLAYS_DROPPED, 1);
    }
}

/// This worker started (`true`) or stopped deciding without Redis.
pub fn redis_fallback(active: bool) {
    if let Some(slot) = worker() {
        slot.fallback(active);
    }
}

#[cfg(test)]
mod tests;

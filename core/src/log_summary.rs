//! The rejection log under a flood (`pow_shield_log_summary`): the first
//! rejection of a client for each reason is written in full; later ones
//! are counted, and each client's count is written as one summary line at
//! most once per interval (`12,345 more rejections of client=192.0.2.7 in
//! the last 10 s`). One [`RejectionLog`] per worker, bounded: at
//! `capacity` clients the oldest is forgotten, and a count it still holds
//! is handed out as a summary then, so no rejection goes uncounted. The
//! breaker and ban lines never pass through here (fail2ban reads them).
//!
//! Time is the caller's (milliseconds); the module calls [`RejectionLog::note`]
//! for each rejection and [`RejectionLog::due`] from a timer, and
//! [`RejectionLog::drain`] when the worker exits.
#![forbid(unsafe_code)]

mod refused_by;

use core::fmt;
use std::collections::{BTreeMap, HashMap};

pub use self::refused_by::{refusing_limit, RefusedBy};

/// `pow_shield_log_summary` when no level sets it.
pub const DEFAULT_INTERVAL_MS: u64 = 10_000;

/// Distinct reasons remembered per client; a client rejected for more
/// (there are about ten) has the others counted, not written.
const REASONS: usize = 8;

/// What to do with one rejection's line.
#[derive(Debug, PartialEq, Eq)]
pub struct Noted<T> {
    /// Write the rejection's own line (the first of its client and reason).
    pub write: bool,
    /// Summary lines to write now: the forgotten client's count (when the
    /// table was full), then this client's (when its interval is over).
    pub summaries: [Option<Summary<T>>; 2],
}

/// A summary line: `count` rejections of one client, not written, over
/// the last `over_ms`. `tag` is what the caller noted with the client's
/// last rejection (its address, the level to write at). A challenge (429)
/// the client paid in the interval is no rejection: `count` leaves it out,
/// and the line says how many there were (`paid`) and how many of those
/// counted are challenges not paid (`unpaid`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary<T> {
    pub count: u64,
    pub over_ms: u64,
    pub tag: T,
    pub unpaid: u64,
    pub paid: u64,
}

/// What a rejection noted is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A 429 with a challenge: no rejection once the client pays it.
    Challenge,
    /// Anything else refused (a failed solution, a block, a 503).
    Rejection,
}

impl<T> Summary<T> {
    /// The line's words after `pow_shield: `, naming the client as `client`.
    pub fn message<'a>(&'a self, client: &'a str) -> impl fmt::Display + 'a {
        SummaryLine {
            count: self.count,
            over_ms: self.over_ms,
            client,
            unpaid: self.unpaid,
            paid: self.paid,
        }
    }
}

struct SummaryLine<'a> {
    count: u64,
    over_ms: u64,
    client: &'a str,
    unpaid: u64,
    paid: u64,
}

impl fmt::Display for SummaryLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.count == 1 {
            "rejection"
        } else {
            "rejections"
        };
        write!(
            f,
            "{} more {what} of client={} in the last {} s",
            Thousands(self.count),
            self.client,
            self.over_ms.div_ceil(1000).max(1)
        )?;
        if self.paid > 0 {
            let what = if self.unpaid == 1 {
                "challenge"
            } else {
                "challenges"
            };
            write!(
                f,
                " ({} unpaid {what}; {} paid, not counted)",
                Thousands(self.unpaid),
                Thousands(self.paid)
            )?;
        }
        Ok(())
    }
}

/// `12345` as `12,345`.
struct Thousands(u64);

impl fmt::Display for Thousands {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.0.to_string();
        for (i, d) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

struct Entry<R, T> {
    /// When the client was first seen: its place in the eviction order.
    seq: u64,
    reasons: [Option<R>; REASONS],
    /// Rejections not written since `since_ms`.
    suppressed: u64,
    /// Of those, challenges (429s), and solutions the client paid since.
    challenges: u64,
    paid: u64,
    /// Start of the current interval (the first line, or the last summary).
    since_ms: u64,
    last_ms: u64,
    interval_ms: u64,
    tag: T,
}

impl<R: Copy + Eq, T: Copy> Entry<R, T> {
    /// Remembers `reason`; true when it is new for this client.
    fn learn(&mut self, reason: R) -> bool {
        for slot in &mut self.reasons {
            match slot {
                Some(known) if *known == reason => return false,
                Some(_) => {}
                None => {
                    *slot = Some(reason);
                    return true;
                }
            }
        }
        false
    }

    /// The count so far as a summary, starting a new interval at `now_ms`.
    /// Challenges paid are left out of the count; a client that paid
    /// every one has no summary.
    fn summary(&mut self, now_ms: u64) -> Option<Summary<T>> {
        let paid = self.paid.min(self.challenges);
        let count = self.suppressed - paid;
        let summary = Summary {
            count,
            over_ms: now_ms.saturating_sub(self.since_ms),
            tag: self.tag,
            unpaid: self.challenges - paid,
            paid,
        };
        let had = self.suppressed;
        self.suppressed = 0;
        self.challenges = 0;
        self.paid = 0;
        if had == 0 {
            return None;
        }
        self.since_ms = now_ms;
        (count > 0).then_some(summary)
    }

    /// Quiet for a whole interval with nothing left to say: forgotten, so
    /// the client's next rejection is written in full again.
    fn spent(&self, now_ms: u64) -> bool {
        self.suppressed == 0 && now_ms.saturating_sub(self.last_ms) >= self.interval_ms
    }
}

/// One worker's memory of the clients it rejected lately. `R` tells
/// reasons apart, `T` is what a summary line needs of the client.
pub struct RejectionLog<R, T> {
    capacity: usize,
    clients: HashMap<Box<[u8]>, Entry<R, T>>,
    /// The clients by `seq`, oldest first.
    order: BTreeMap<u64, Box<[u8]>>,
    next_seq: u64,
}

impl<R: Copy + Eq, T: Copy> RejectionLog<R, T> {
    /// At most `capacity` clients (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            clients: HashMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    pub fn len(&self) -> usize {
        self.clients.len()
    }

    /// A rejection of `client` for `reason` at `now_ms`, where summaries
    /// are `interval_ms` apart.
    pub fn note(
        &mut self,
        client: &[u8],
        reason: R,
        now_ms: u64,
        interval_ms: u64,
        tag: T,
    ) -> Noted<T> {
        self.note_as(client, (reason, Kind::Rejection), now_ms, interval_ms, tag)
    }

    /// A solution of `client` was accepted: one challenge counted since
    /// its last line was paid, and is no rejection (nothing if the client
    /// was not rejected lately).
    pub fn paid(&mut self, client: &[u8]) {
        if let Some(entry) = self.clients.get_mut(client) {
            entry.paid = entry.paid.saturating_add(1);
        }
    }

    /// As [`RejectionLog::note`], for a rejection of `kind`.
    pub fn note_as(
        &mut self,
        client: &[u8],
        (reason, kind): (R, Kind),
        now_ms: u64,
        interval_ms: u64,
        tag: T,
    ) -> Noted<T> {
        let mut noted = Noted {
            write: false,
            summaries: [None, None],
        };
        if let Some(entry) = self.clients.get_mut(client) {
            if entry.spent(now_ms) {
                self.forget(client);
            } else {
                entry.tag = tag;
                entry.last_ms = now_ms;
                entry.interval_ms = interval_ms;
                noted.write = entry.learn(reason);
                if !noted.write {
                    entry.suppressed += 1;
                    if kind == Kind::Challenge {
                        entry.challenges += 1;
                    }
                    if now_ms.saturating_sub(entry.since_ms) >= interval_ms {
                        noted.summaries[1] = entry.summary(now_ms);
                    }
                }
                return noted;
            }
        }
        if self.clients.len() >= self.capacity {
            noted.summaries[0] = self.evict_oldest(now_ms);
        }
        let mut reasons = [None; REASONS];
        reasons[0] = Some(reason);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.clients.insert(
            client.into(),
            Entry {
                seq,
                reasons,
                suppressed: 0,
                challenges: 0,
                paid: 0,
                since_ms: now_ms,
                last_ms: now_ms,
                interval_ms,
                tag,
            },
        );
        self.order.insert(seq, client.into());
        noted.write = true;
        noted
    }

    /// The timer: the summary of every client whose interval is over, and
    /// clients quiet for an interval are forgotten.
    pub fn due(&mut self, now_ms: u64, mut out: impl FnMut(Summary<T>)) {
        let mut spent = Vec::new();
        for (client, entry) in &mut self.clients {
            if now_ms.saturating_sub(entry.since_ms) >= entry.interval_ms {
                if let Some(summary) = entry.summary(now_ms) {
                    out(summary);
                }
            }
            if entry.spent(now_ms) {
                spent.push(client.clone());
            }
        }
        for client in spent {
            self.forget(&client);
        }
    }

    /// The worker exits: every count left, as summaries; the log is empty
    /// afterwards.
    pub fn drain(&mut self, now_ms: u64, mut out: impl FnMut(Summary<T>)) {
        for (_, mut entry) in self.clients.drain() {
            if let Some(summary) = entry.summary(now_ms) {
                out(summary);
            }
        }
        self.order.clear();
    }

    fn forget(&mut self, client: &[u8]) {
        if let Some(entry) = self.clients.remove(client) {
            self.order.remove(&entry.seq);
        }
    }

    fn evict_oldest(&mut self, now_ms: u64) -> Option<Summary<T>> {
        let (_, client) = self.order.pop_first()?;
        let mut entry = self.clients.remove(&client)?;
        entry.summary(now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_S: u64 = 10_000;

    type Log = RejectionLog<&'static str, u8>;

    fn count(noted: &Noted<u8>) -> Vec<u64> {
        noted.summaries.iter().flatten().map(|s| s.count).collect()
    }

    #[test]
    fn the_first_rejection_of_a_client_and_reason_is_written() {
        let mut log = Log::new(16);
        assert!(log.note(b"a", "over", 0, TEN_S, 0).write);
        assert!(!log.note(b"a", "over", 1, TEN_S, 0).write);
        assert!(log.note(b"a", "blocked", 2, TEN_S, 0).write, "a new reason");
        assert!(log.note(b"b", "over", 3, TEN_S, 0).write, "a new client");
    }

    #[test]
    fn a_flood_gives_one_summary_per_interval_with_every_suppressed_rejection() {
        let mut log = Log::new(16);
        log.note(b"a", "over", 0, TEN_S, 0);
        let mut summaries = Vec::new();
        // 12,345 more in the first 10 s, one per 0.5 ms
        for i in 1..=12_345u64 {
            let noted = log.note(b"a", "over", i * 10_000 / 12_346, TEN_S, 0);
            assert!(!noted.write);
            summaries.extend(noted.summaries.into_iter().flatten());
        }
        assert!(
            summaries.is_empty(),
            "no summary before the interval is over"
        );
        let noted = log.note(b"a", "over", TEN_S, TEN_S, 7);
        let summary = noted.summaries[1].unwrap();
        assert_eq!(
            summary,
            Summary {
                count: 12_346,
                over_ms: TEN_S,
                tag: 7,
                unpaid: 0,
                paid: 0,
            }
        );
        assert_eq!(
            summary.message("192.0.2.7").to_string(),
            "12,346 more rejections of client=192.0.2.7 in the last 10 s"
        );
        assert_eq!(
            count(&log.note(b"a", "over", TEN_S + 1, TEN_S, 0)),
            Vec::<u64>::new()
        );
    }

    #[test]
    fn the_timer_writes_what_is_left_and_then_forgets_a_quiet_client() {
        let mut log = Log::new(16);
        log.note(b"a", "over", 0, TEN_S, 0);
        log.note(b"a", "over", 1, TEN_S, 0);
        log.note(b"a", "over", 2, TEN_S, 0);
        let mut out = Vec::new();
        log.due(9_999, |s| out.push(s.count));
        assert_eq!(out, Vec::<u64>::new(), "not before the interval is over");
        log.due(TEN_S, |s| out.push(s.count));
        assert_eq!(out, [2]);
        assert_eq!(log.len(), 1, "kept: it was rejected within the interval");
        log.due(20_002, |s| out.push(s.count));
        assert_eq!(out, [2], "nothing more to say");
        assert!(log.is_empty(), "quiet for an interval: forgotten");
        assert!(
            log.note(b"a", "over", 20_003, TEN_S, 0).write,
            "written again"
        );
    }

    #[test]
    fn a_client_back_after_a_quiet_interval_is_written_again() {
        let mut log = Log::new(16);
        log.note(b"a", "over", 0, TEN_S, 0);
        assert!(log.note(b"a", "over", TEN_S, TEN_S, 0).write);
    }

    #[test]
    fn a_full_table_forgets_the_oldest_and_hands_out_its_count() {
        let mut log = Log::new(2);
        log.note(b"a", "over", 0, TEN_S, 1);
        log.note(b"a", "over", 1, TEN_S, 1);
        log.note(b"b", "over", 2, TEN_S, 2);
        let noted = log.note(b"c", "over", 3, TEN_S, 3);
        assert!(noted.write);
        assert_eq!(
            noted.summaries[0],
            Some(Summary {
                count: 1,
                over_ms: 3,
                tag: 1,
                unpaid: 0,
                paid: 0,
            })
        );
        assert_eq!(log.len(), 2);
        // b had nothing suppressed: forgotten without a line
        assert_eq!(
            count(&log.note(b"d", "over", 4, TEN_S, 4)),
            Vec::<u64>::new()
        );
        assert!(log.note(b"a", "over", 5, TEN_S, 1).write, "a was forgotten");
    }

    #[test]
    fn drain_hands_out_every_count_left() {
        let mut log = Log::new(16);
        for client in [&b"a"[..], b"b", b"c"] {
            for t in 0..4 {
                log.note(client, "over", t, TEN_S, 0);
            }
        }
        let mut total = 0;
        log.drain(5, |s| total += s.count);
        assert_eq!(total, 9);
        assert!(log.is_empty());
    }

    #[test]
    fn more_reasons_than_remembered_are_counted_not_lost() {
        let mut log = Log::new(16);
        let reasons = ["r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8"];
        let written = reasons
            .iter()
            .filter(|r| log.note(b"a", **r, 0, TEN_S, 0).write)
            .count();
        assert_eq!(written, REASONS);
        let mut total = 0;
        log.drain(1, |s| total += s.count);
        assert_eq!(total, 1);
    }

    #[test]
    fn summary_lines_count_in_thousands_and_whole_seconds() {
        let line = |count, over_ms| {
            Summary {
                count,
                over_ms,
                tag: (),
                unpaid: 0,
                paid: 0,
            }
            .message("2001:db8::1")
            .to_string()
        };
        assert_eq!(
            line(1, 400),
            "1 more rejection of client=2001:db8::1 in the last 1 s"
        );
        assert_eq!(
            line(999, 1_000),
            "999 more rejections of client=2001:db8::1 in the last 1 s"
        );
        assert_eq!(
            line(1_000, 10_001),
            "1,000 more rejections of client=2001:db8::1 in the last 11 s"
        );
        assert_eq!(
            line(1_234_567, 60_000),
            "1,234,567 more rejections of client=2001:db8::1 in the last 60 s"
        );
    }

    #[test]
    fn paid_challenges_are_no_rejections_and_the_line_says_how_many_there_were() {
        let mut log = Log::new(16);
        let challenge = ("over", Kind::Challenge);
        log.note_as(b"a", challenge, 0, TEN_S, 0);
        for t in 1..=10 {
            log.note_as(b"a", challenge, t, TEN_S, 0);
        }
        for _ in 0..8 {
            log.paid(b"a");
        }
        log.note(b"a", "spent", 11, TEN_S, 0);
        log.note(b"a", "spent", 12, TEN_S, 0);
        let mut out = Vec::new();
        log.due(TEN_S, |s| out.push(s));
        let [summary] = out[..] else {
            panic!("one summary: {out:?}");
        };
        assert_eq!((summary.count, summary.unpaid, summary.paid), (3, 2, 8));
        assert_eq!(
            summary.message("192.0.2.7").to_string(),
            "3 more rejections of client=192.0.2.7 in the last 10 s \
             (2 unpaid challenges; 8 paid, not counted)"
        );
    }

    #[test]
    fn a_client_that_paid_every_challenge_has_no_summary() {
        let mut log = Log::new(16);
        for t in 0..5 {
            log.note_as(b"a", ("over", Kind::Challenge), t, TEN_S, 0);
            log.paid(b"a");
        }
        let mut out = Vec::new();
        log.due(TEN_S, |s| out.push(s.count));
        assert_eq!(out, Vec::<u64>::new());
    }
}

//! The rejection log under a flood (`pow_shield_log_summary`): the first
//! rejection of a client for each reason is written in full; later ones
//! are counted, and each client's count is written as one summary line at
//! most once per interval (`12,345 more rejections of client=192.0.2.7 in
//! the last 10 s`). A challenge sent because a limit with its own `key=`
//! (a /24, an AS, the site) had no room is counted under that limit and
//! value instead ([`noted_under`]): a scraper rotating through a refused
//! /24's addresses writes one line for the /24, not one per address. One
//! [`RejectionLog`] per worker, bounded: at `capacity` clients and limit
//! values the oldest is forgotten, and a count it still holds is handed
//! out as a summary then, so no rejection goes uncounted. The breaker and
//! ban lines never pass through here (fail2ban reads them).
//!
//! Time is the caller's (milliseconds); the module calls [`RejectionLog::note`]
//! for each rejection and [`RejectionLog::due`] from a timer, and
//! [`RejectionLog::drain`] when the worker exits.
#![forbid(unsafe_code)]

mod refused_by;
mod summary;
mod under;

use std::collections::{BTreeMap, HashMap};

use crate::limiter::LimitName;

pub use self::refused_by::{refusing_limit, RefusedBy};
pub use self::summary::Summary;
pub use self::under::{keyed_values, noted_under, Under};

/// `pow_shield_log_summary` when no level sets it.
pub const DEFAULT_INTERVAL_MS: u64 = 10_000;

/// Distinct reasons remembered per client (or limit value); one rejected
/// for more (there are about ten) has the others counted, not written.
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

/// What a rejection noted is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A 429 with a challenge: no rejection once the client pays it.
    Challenge,
    /// Anything else refused (a failed solution, a block, a 503).
    Rejection,
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

    /// The count so far as a summary of the table key `id`, starting a
    /// new interval at `now_ms`. Challenges paid are left out of the
    /// count; a client that paid every one has no summary.
    fn summary(&mut self, id: &[u8], now_ms: u64) -> Option<Summary<T>> {
        let paid = self.paid.min(self.challenges);
        let count = self.suppressed - paid;
        let unpaid = self.challenges - paid;
        let had = self.suppressed;
        self.suppressed = 0;
        self.challenges = 0;
        self.paid = 0;
        if had == 0 {
            return None;
        }
        let over_ms = now_ms.saturating_sub(self.since_ms);
        self.since_ms = now_ms;
        (count > 0).then(|| Summary {
            count,
            over_ms,
            tag: self.tag,
            unpaid,
            paid,
            limit: under::limit_words(id),
        })
    }

    /// Quiet for a whole interval with nothing left to say: forgotten, so
    /// the client's next rejection is written in full again.
    fn spent(&self, now_ms: u64) -> bool {
        self.suppressed == 0 && now_ms.saturating_sub(self.last_ms) >= self.interval_ms
    }

    /// Some challenge counted is not paid yet.
    fn owed(&self) -> bool {
        self.challenges > self.paid
    }
}

/// One worker's memory of the clients (and keyed limits' values) it
/// rejected lately. `R` tells reasons apart, `T` is what a summary line
/// needs of the client.
pub struct RejectionLog<R, T> {
    capacity: usize,
    /// By table key ([`Under`]'s bytes).
    clients: HashMap<Box<[u8]>, Entry<R, T>>,
    /// The table keys by `seq`, oldest first.
    order: BTreeMap<u64, Box<[u8]>>,
    next_seq: u64,
    /// A table key being looked up, kept to spare an allocation each.
    id: Vec<u8>,
}

impl<R: Copy + Eq, T: Copy> RejectionLog<R, T> {
    /// At most `capacity` clients and limit values (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            clients: HashMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
            id: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    pub fn len(&self) -> usize {
        self.clients.len()
    }

    /// A rejection counted under `under` for `reason` at `now_ms`, where
    /// summaries are `interval_ms` apart.
    pub fn note(
        &mut self,
        under: Under,
        reason: R,
        now_ms: u64,
        interval_ms: u64,
        tag: T,
    ) -> Noted<T> {
        self.note_as(under, (reason, Kind::Rejection), now_ms, interval_ms, tag)
    }

    /// A solution of `client` was accepted: one challenge counted since
    /// the last line was paid, and is no rejection. `keyed`: the
    /// location's keyed limits with the request's value for each
    /// ([`keyed_values`]). Which count the challenge joined is not known
    /// here (a token does not name the limit that refused it): the
    /// client's own whenever it has one (a client refused lately by its
    /// own limit: its payment says nothing of its /24's other addresses,
    /// whose count it must not make look paid), else the first of `keyed`
    /// that has a challenge not paid yet (nothing if none). A count is
    /// never paid beyond its challenges.
    pub fn paid<'a>(
        &mut self,
        client: &[u8],
        keyed: impl IntoIterator<Item = (LimitName, &'a [u8])>,
    ) {
        let mut id = core::mem::take(&mut self.id);
        Under::Client(client).write_id(&mut id);
        let owed = self.clients.contains_key(&id[..])
            || keyed.into_iter().any(|(name, key)| {
                let by = RefusedBy {
                    name: name.as_str(),
                    key: Some(key),
                };
                self.owes(Under::Limit(by), &mut id)
            });
        if !owed {
            Under::Client(client).write_id(&mut id);
        }
        if let Some(entry) = self.clients.get_mut(&id[..]) {
            entry.paid = entry.paid.saturating_add(1);
        }
        self.id = id;
    }

    /// `under`'s count has a challenge not paid yet; its key left in `id`.
    fn owes(&self, under: Under, id: &mut Vec<u8>) -> bool {
        under.write_id(id);
        self.clients.get(&id[..]).is_some_and(Entry::owed)
    }

    /// As [`RejectionLog::note`], for a rejection of `kind`.
    pub fn note_as(
        &mut self,
        under: Under,
        (reason, kind): (R, Kind),
        now_ms: u64,
        interval_ms: u64,
        tag: T,
    ) -> Noted<T> {
        let mut id = core::mem::take(&mut self.id);
        under.write_id(&mut id);
        let noted = self.note_id(&id, (reason, kind), now_ms, interval_ms, tag);
        self.id = id;
        noted
    }

    fn note_id(
        &mut self,
        id: &[u8],
        (reason, kind): (R, Kind),
        now_ms: u64,
        interval_ms: u64,
        tag: T,
    ) -> Noted<T> {
        let mut noted = Noted {
            write: false,
            summaries: [None, None],
        };
        if let Some(entry) = self.clients.get_mut(id) {
            if entry.spent(now_ms) {
                self.forget(id);
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
                        noted.summaries[1] = entry.summary(id, now_ms);
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
            id.into(),
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
        self.order.insert(seq, id.into());
        noted.write = true;
        noted
    }

    /// The timer: the summary of every client whose interval is over, and
    /// clients quiet for an interval are forgotten.
    pub fn due(&mut self, now_ms: u64, mut out: impl FnMut(Summary<T>)) {
        let mut spent = Vec::new();
        for (id, entry) in &mut self.clients {
            if now_ms.saturating_sub(entry.since_ms) >= entry.interval_ms {
                if let Some(summary) = entry.summary(id, now_ms) {
                    out(summary);
                }
            }
            if entry.spent(now_ms) {
                spent.push(id.clone());
            }
        }
        for id in spent {
            self.forget(&id);
        }
    }

    /// The worker exits: every count left, as summaries; the log is empty
    /// afterwards.
    pub fn drain(&mut self, now_ms: u64, mut out: impl FnMut(Summary<T>)) {
        for (id, mut entry) in self.clients.drain() {
            if let Some(summary) = entry.summary(&id, now_ms) {
                out(summary);
            }
        }
        self.order.clear();
    }

    fn forget(&mut self, id: &[u8]) {
        if let Some(entry) = self.clients.remove(id) {
            self.order.remove(&entry.seq);
        }
    }

    fn evict_oldest(&mut self, now_ms: u64) -> Option<Summary<T>> {
        let (_, id) = self.order.pop_first()?;
        let mut entry = self.clients.remove(&id)?;
        entry.summary(&id, now_ms)
    }
}

#[cfg(test)]
mod tests;

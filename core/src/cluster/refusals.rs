//! Cluster mode's local refusals (docs/operations.md, "What is decided
//! where"): when Redis refuses a client until `T` (the moment a slot of its
//! window frees), the node refuses that client's further unpaid requests
//! itself until `T`, and counts each of them as a strike at once; the
//! strikes go to Redis in batches ([`Batches`]).
//!
//! Refusing locally never admits more than the limit (it only refuses) and
//! never refuses longer than Redis would have: nothing but time frees a
//! slot (other nodes' requests only fill the window), and `T` is counted
//! from the moment the check was sent, which is no later than the moment
//! Redis read its clock.

use std::collections::HashMap;

use crate::limiter::breaker::{BreakerRules, BreakerStatus};
use crate::limiter::Verdict;
use crate::store::Checked;

mod key;
use key::mix;
pub use key::{refusal_key, refusal_key_of, RefusalKey, REFUSAL_PREFIX};

/// How often, at the longest, a node sends a client's locally counted
/// strikes to Redis (and sooner when they reach the strike threshold).
pub const BATCH_MS: u64 = 100;

/// How often a client's refusals go to Redis when they are no strikes
/// (`pow_shield_strikes off`) and only a rising price reads their count:
/// the price on other nodes follows within this, at a tenth of the calls.
pub const PRICE_BATCH_MS: u64 = 1_000;

/// How old Redis's word on a refused client may be for the node to refuse
/// it alone: older, the next request asks Redis (which may have heard of
/// other nodes' strikes, a block, a ban). A flooding client's word is
/// renewed by every batch, so this costs it nothing.
pub const FRESH_MS: u64 = 500;

/// How old Redis's own refusal of a client may be for the node to go on
/// refusing it alone until `T`: older, the next request
/// asks Redis again, so that a flush, a restart or a generation change
/// reaches the node within this (one call per refused client and 2 s).
/// (A batch's answer counts refusals; only a check says the client is
/// refused still.)
pub const QUIET_FRESH_MS: u64 = 2_000;

/// A refusal Redis decided, as the node keeps it in its zone: what Redis
/// said, and what the node added since. Plain integers (any bytes are a
/// valid value: it lives in a zone entry's payload).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalRefusal {
    /// `T`, on the monotonic clock (its low 32 bits: `T` is never more
    /// than two windows, two days, away): until then the client stays
    /// refused.
    until: u32,
    /// When Redis last spoke of the client (a check, a batch), same clock.
    heard: u32,
    /// `Reset` (the oldest counted request leaves the window) this many ms
    /// before `T` (0 unless the limit was lowered while the window held
    /// requests; a refusal beyond 65 s is not kept).
    pub reset_before_ms: u16,
    /// Of the refusals below, those not yet taken into a worker's batch:
    /// whichever worker next sends for the client takes them all (the
    /// timer of a worker that refused one, or any worker about to ask
    /// Redis about the client, so that Redis decides on every strike the
    /// node counted). Taken within [`BATCH_MS`]; a refusal that would
    /// overflow it is left to Redis.
    pub pending: u16,
    /// Refusals in the window (rising difficulty), this node's unsent
    /// ones included.
    pub over: u32,
    /// The client's strikes, this node's unsent ones included.
    pub strikes: u32,
    /// Of those, refused here and not yet acknowledged by Redis (every
    /// worker of the node).
    pub unsent: u32,
    /// When Redis's own check last refused the client (not a batch's
    /// answer), same clock as `until`.
    checked: u32,
}

/// What a local refusal decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The answer Redis would have given.
    pub checked: Checked,
}

impl LocalRefusal {
    /// Learns Redis's refusal of a check sent at `asked_ms` (monotonic):
    /// `T` is `asked_ms` plus the reply's `Retry-After`, never later than
    /// Redis's own. What this node counted but did not send yet stays
    /// added.
    /// Returns `T` (monotonic ms), when the entry may go; `None` (nothing
    /// learnt) for a refusal the entry cannot hold.
    pub fn learn(
        &mut self,
        verdict: &Verdict,
        breaker: &BreakerStatus,
        asked_ms: u64,
    ) -> Option<u64> {
        let reset_before_ms = verdict
            .retry_after_ms
            .saturating_sub(verdict.reset_after_ms);
        self.reset_before_ms = u16::try_from(reset_before_ms).ok()?;
        let until = asked_ms.saturating_add(verdict.retry_after_ms);
        self.until = until as u32;
        self.heard = asked_ms as u32;
        self.checked = asked_ms as u32;
        self.over = verdict.over.saturating_add(self.unsent);
        self.strikes = breaker.strikes.saturating_add(self.unsent);
        Some(until)
    }

    /// Milliseconds from `now_ms` to `T` (negative: past).
    fn ms_to_t(&self, now_ms: u64) -> i64 {
        i64::from(self.until.wrapping_sub(now_ms as u32) as i32)
    }

    /// Whether the client is still refused at `now_ms` (monotonic, read
    /// fresh): strictly before `T`.
    pub fn holds(&self, now_ms: u64) -> bool {
        self.ms_to_t(now_ms) > 0
    }

    /// Whether Redis spoke of the client less than [`FRESH_MS`] ago.
    pub fn fresh(&self, now_ms: u64) -> bool {
        self.heard_within(self.heard, now_ms, FRESH_MS)
    }

    /// Whether Redis's own check refused the client less than
    /// [`QUIET_FRESH_MS`] ago.
    pub fn checked_lately(&self, now_ms: u64) -> bool {
        self.heard_within(self.checked, now_ms, QUIET_FRESH_MS)
    }

    fn heard_within(&self, at: u32, now_ms: u64, ms: u64) -> bool {
        let age = (now_ms as u32).wrapping_sub(at) as i32;
        i64::from(age) < ms as i64
    }

    /// Refuses one more unpaid request at `now_ms`, if still before `T`:
    /// the headers and difficulty Redis would have produced, one more
    /// refusal and (strikes on) one more strike, counted here at once.
    /// `None`: past `T`, or Redis's word is not fresh (unless `stale_ok`:
    /// Redis has not answered the node's last batch for the client, or is
    /// down: asking it would only wait): ask Redis.
    /// `redis_up`: Redis takes commands; while it does not, nothing is
    /// refused here (the fallback rule decides, as for any request: under
    /// `local` the zone's own window, breaker and spends).
    /// The refusal is left for a worker to send (`pending`) only if Redis
    /// needs it: it is a strike, or `rising` difficulty reads the count.
    pub fn refuse(
        &mut self,
        rules: BreakerRules,
        now_ms: u64,
        (stale_ok, redis_up): (bool, bool),
        rising: bool,
    ) -> Option<Refused> {
        if !redis_up {
            return None;
        }
        let threshold = rules.strikes.map_or(0, |s| s.threshold);
        // Without strikes only `T` matters: nothing Redis hears of since
        // (there is no block to learn) changes the answer; a rising price
        // follows what other nodes counted with each batch's answer.
        let reported = threshold > 0 || rising;
        // Redis's own check, not only a batch's answer, must be recent: a
        // flush or a new generation reaches the node within QUIET_FRESH_MS.
        let stale =
            !self.checked_lately(now_ms) || (threshold > 0 && !(stale_ok || self.fresh(now_ms)));
        if !self.holds(now_ms) || stale || self.pending == u16::MAX {
            return None;
        }
        // The strike that would reach the threshold is Redis's to count,
        // with every strike the node counted (the worker asking takes them
        // along): spends on other nodes may have taken back strikes this
        // node still counts (a paying client is never blocked for them).
        if threshold > 0 && self.strikes.saturating_add(1) >= threshold {
            return None;
        }
        self.over = self.over.saturating_add(1);
        if reported {
            self.unsent = self.unsent.saturating_add(1);
            self.pending = self.pending.saturating_add(1);
        }
        let retry_after_ms = self.ms_to_t(now_ms) as u64;
        let verdict = Verdict {
            allowed: false,
            remaining: 0,
            reset_after_ms: retry_after_ms.saturating_sub(self.reset_before_ms.into()),
            retry_after_ms,
            over: self.over,
            // (Only a location's one limit is refused locally.)
            limit: 0,
        };
        // As the window scripts strike: only with a strike threshold.
        let mut breaker = BreakerStatus {
            strikes: self.strikes,
            ..BreakerStatus::default()
        };
        if threshold > 0 {
            self.strikes = self.strikes.saturating_add(1);
            breaker.strikes = self.strikes;
        }
        Some(Refused {
            checked: Checked {
                verdict,
                breaker,
                struck: threshold > 0,
                ..Checked::default()
            },
        })
    }

    /// Redis took `sent` of the unsent refusals and now counts `over`
    /// refusals and `strikes` strikes (every node's): what is still unsent
    /// here stays added.
    pub fn acknowledged(&mut self, sent: u32, over: u32, strikes: u32, now_ms: u64) {
        self.heard = now_ms as u32;
        self.unsent = self.unsent.saturating_sub(sent);
        self.over = over.saturating_add(self.unsent);
        self.strikes = strikes.saturating_add(self.unsent);
    }

    /// Takes the refusals no worker took yet, for one worker's batch.
    pub fn take_pending(&mut self) -> u32 {
        core::mem::take(&mut self.pending).into()
    }

    /// Stops refusing locally (a block supersedes the refusal, or Redis
    /// may have lost what it said): Redis decides the next request. The
    /// counts stay until a worker took what is pending.
    pub fn release(&mut self, now_ms: u64) {
        self.until = now_ms as u32;
    }

    /// Whether the entry can go: nothing is left for a worker to take.
    pub fn disposable(&self) -> bool {
        self.pending == 0
    }

    /// A spend took one strike back: Redis now counts `strikes`.
    pub fn forgiven(&mut self, strikes: u32) {
        self.strikes = strikes.saturating_add(self.unsent);
    }
}

/// The refusals of one client (and limit) a worker took from the zone to
/// send. Counted as a running total of a numbered run: Redis keeps, per
/// worker, the last run and total it applied, and applies only what a call
/// adds to it, so a call that is resent, overtaken or answered late never
/// counts a refusal twice, and several may be on their way at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch<C> {
    /// What the call needs (the client, its limit and rules).
    pub context: C,
    /// This run's number, increasing per worker (a new entry, a new run).
    run: u64,
    /// Refusals taken from the zone in this run.
    taken: u64,
    /// The highest total Redis applied (or had applied) of this run.
    acked: u64,
    /// The highest total submitted and waiting for its reply.
    in_flight: Option<u64>,
    /// When the last call for it was taken (monotonic ms).
    sent_ms: Option<u64>,
}

/// A batch call on its way to Redis: the run, and the running total it
/// brings Redis to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sending {
    pub run: u64,
    pub total: u64,
    /// What of the run Redis acknowledged when the call went: where Redis
    /// has no record of the run (it lost its data), the rest is counted.
    pub base: u64,
}

/// A worker's batches, by client (and limit). Exact: a refusal is taken
/// from the zone by one worker only, and Redis applies each total once
/// whatever how often, or in which order, it arrives.
#[derive(Debug)]
pub struct Batches<C> {
    batches: HashMap<RefusalKey, Batch<C>>,
    runs: u64,
}

impl<C> Default for Batches<C> {
    fn default() -> Self {
        Self {
            batches: HashMap::new(),
            runs: 0,
        }
    }
}

impl<C: Clone> Batches<C> {
    /// Notes that the zone may hold refusals of `key` for this worker to
    /// take (it refused one), and takes `n` of them.
    pub fn add(&mut self, key: &[u8], n: u32, context: impl FnOnce() -> C) {
        match self.batches.get_mut(key) {
            Some(batch) => batch.taken = batch.taken.saturating_add(n.into()),
            None => {
                self.runs += 1;
                self.batches.insert(
                    RefusalKey::from(key),
                    Batch {
                        context: context(),
                        run: self.runs,
                        taken: n.into(),
                        acked: 0,
                        in_flight: None,
                        sent_ms: None,
                    },
                );
            }
        }
    }

    /// Takes `n` more refusals into `key`'s batch, if this worker keeps
    /// one (the zone holds refusals only of clients a worker refused).
    pub fn take_more(&mut self, key: &[u8], n: u32) {
        if let Some(batch) = self.batches.get_mut(key) {
            batch.taken = batch.taken.saturating_add(n.into());
        }
    }

    /// Every key with refusals that no call on its way carries, and whose
    /// last call was taken at least `every(context)` ms before `now_ms`.
    pub fn due(&self, now_ms: u64, every: impl Fn(&C) -> u64) -> Vec<RefusalKey> {
        self.batches
            .iter()
            .filter(|(_, b)| b.taken > b.in_flight.unwrap_or(0).max(b.acked))
            .filter(|(_, b)| {
                b.sent_ms
                    .is_none_or(|sent| now_ms.saturating_sub(sent) >= every(&b.context))
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Whether anything waits to be sent or acknowledged.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Refusals taken and not acknowledged yet.
    pub fn unacknowledged(&self) -> u64 {
        self.batches.values().map(|b| b.taken - b.acked).sum()
    }

    /// The call to submit now for `key`, if it has refusals that no call
    /// on its way carries (a call that failed is covered by the next).
    pub fn take(&mut self, key: &[u8], now_ms: u64) -> Option<(Sending, C)> {
        let batch = self.batches.get_mut(key)?;
        let covered = batch.in_flight.unwrap_or(batch.acked);
        if batch.taken <= covered.max(batch.acked) {
            return None;
        }
        batch.in_flight = Some(batch.taken);
        batch.sent_ms = Some(now_ms);
        Some((
            Sending {
                run: batch.run,
                total: batch.taken,
                base: batch.acked,
            },
            batch.context.clone(),
        ))
    }

    /// Whether Redis owes this worker an answer for `key`.
    pub fn awaiting(&self, key: &[u8]) -> bool {
        self.batches.get(key).is_some_and(|b| b.in_flight.is_some())
    }

    /// Calls waiting for their reply.
    pub fn in_flight(&self) -> usize {
        self.batches
            .values()
            .filter(|b| b.in_flight.is_some())
            .count()
    }

    /// Every key this worker keeps a batch for.
    pub fn keys(&self) -> Vec<RefusalKey> {
        self.batches.keys().cloned().collect()
    }

    /// Redis applied (or had applied) `sent`: how many refusals that
    /// acknowledges for the first time.
    pub fn acknowledged(&mut self, key: &[u8], sent: Sending) -> u32 {
        let Some(batch) = self.batches.get_mut(key) else {
            return 0;
        };
        if batch.run != sent.run || sent.total <= batch.acked {
            return 0;
        }
        let newly = sent.total - batch.acked;
        batch.acked = sent.total;
        if batch.in_flight.is_some_and(|t| t <= sent.total) {
            batch.in_flight = None;
        }
        u32::try_from(newly).unwrap_or(u32::MAX)
    }

    /// `sent` got no answer (or could not be submitted): whether Redis
    /// applied it is unknown; the next call carries its total again.
    pub fn failed(&mut self, key: &[u8], sent: Sending) {
        if let Some(batch) = self.batches.get_mut(key) {
            if batch.run == sent.run && batch.in_flight == Some(sent.total) {
                batch.in_flight = None;
            }
        }
    }

    /// Drops `key`'s batch if Redis has all of it (the zone had nothing
    /// more to take): the next refusal starts a new run.
    pub fn settle(&mut self, key: &[u8]) {
        if self
            .batches
            .get(key)
            .is_some_and(|b| b.acked == b.taken && b.in_flight.is_none())
        {
            self.batches.remove(key);
        }
    }

    /// Gives every batch up (a worker that cannot reach Redis before it
    /// must exit): how many refusals were lost.
    pub fn drop_all(&mut self) -> u64 {
        let lost = self.unacknowledged();
        self.batches.clear();
        lost
    }
}

/// Which Redis keys a refusal speaks of: a hash of the Redis (as its
/// configuration names it) and the key prefix, so that a reload to another
/// Redis, database or prefix never refuses on what the old one said.
pub fn scope(parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    for part in parts {
        for b in part.iter().chain(&[0xff]) {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    // (FNV's low bits hear only the input's low bits: mixed, so that the
    // 56 a refusal key keeps of it differ as much as the whole.)
    mix(h)
}

#[cfg(test)]
mod tests;

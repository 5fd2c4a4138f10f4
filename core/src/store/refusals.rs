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

use crate::limiter::breaker::{Block, BreakerRules, BreakerStatus, Tripped};
use crate::limiter::{RateLimit, Verdict};
use crate::store::Checked;

/// How often, at the longest, a node sends a client's locally counted
/// strikes to Redis (and sooner when they reach the strike threshold).
pub const BATCH_MS: u64 = 100;

/// How old Redis's word on a refused client may be for the node to refuse
/// it alone: older, the next request asks Redis (which may have heard of
/// other nodes' strikes, a block, a ban). A flooding client's word is
/// renewed by every batch, so this costs it nothing.
pub const FRESH_MS: u64 = 500;

/// A refusal Redis decided, as the node keeps it in its zone: what Redis
/// said, and what the node added since. Plain integers (any bytes are a
/// valid value: it lives in a zone entry's payload).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refusal {
    /// `T`, on the monotonic clock (its low 32 bits: `T` is never more
    /// than two windows, two days, away): until then the client stays
    /// refused.
    until: u32,
    /// When Redis last spoke of the client (a check, a batch), same clock.
    heard: u32,
    /// `Reset` (the oldest counted request leaves the window) this many ms
    /// before `T`.
    pub reset_before_ms: u32,
    /// Refusals in the window (rising difficulty), this node's unsent
    /// ones included.
    pub over: u32,
    /// The client's strikes, this node's unsent ones included.
    pub strikes: u32,
    /// Of those, refused here and not yet acknowledged by Redis (every
    /// worker of the node).
    pub unsent: u32,
}

/// What a local refusal decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The answer Redis would have given.
    pub checked: Checked,
}

impl Refusal {
    /// Learns Redis's refusal of a check sent at `asked_ms` (monotonic):
    /// `T` is `asked_ms` plus the reply's `Retry-After`, never later than
    /// Redis's own. What this node counted but did not send yet stays
    /// added.
    /// Returns `T` (monotonic ms), when the entry may go.
    pub fn learn(&mut self, verdict: &Verdict, breaker: &BreakerStatus, asked_ms: u64) -> u64 {
        let until = asked_ms.saturating_add(verdict.retry_after_ms);
        self.until = until as u32;
        self.heard = asked_ms as u32;
        self.reset_before_ms = u32::try_from(
            verdict
                .retry_after_ms
                .saturating_sub(verdict.reset_after_ms),
        )
        .unwrap_or(u32::MAX);
        self.over = verdict.over.saturating_add(self.unsent);
        self.strikes = breaker.strikes.saturating_add(self.unsent);
        until
    }

    /// Milliseconds from `now_ms` to `T` (negative: past).
    fn to_t(&self, now_ms: u64) -> i64 {
        i64::from(self.until.wrapping_sub(now_ms as u32) as i32)
    }

    /// Whether the client is still refused at `now_ms` (monotonic, read
    /// fresh): strictly before `T`.
    pub fn holds(&self, now_ms: u64) -> bool {
        self.to_t(now_ms) > 0
    }

    /// Whether Redis spoke of the client less than [`FRESH_MS`] ago.
    pub fn fresh(&self, now_ms: u64) -> bool {
        let age = (now_ms as u32).wrapping_sub(self.heard) as i32;
        i64::from(age) < FRESH_MS as i64
    }

    /// Refuses one more unpaid request at `now_ms`, if still before `T`:
    /// the headers and difficulty Redis would have produced, one more
    /// refusal and (strikes on) one more strike, counted here at once.
    /// `None`: past `T`, or Redis's word is not fresh (unless `stale_ok`:
    /// Redis has not answered the node's last batch for the client, or is
    /// down: asking it would only wait): ask Redis.
    /// `redis_up`: Redis takes commands (else the strike reaching the
    /// threshold is refused here too: Redis counts it with the batch).
    pub fn refuse(
        &mut self,
        rules: BreakerRules,
        now_ms: u64,
        stale_ok: bool,
        redis_up: bool,
    ) -> Option<Refused> {
        if !self.holds(now_ms) || !(stale_ok || self.fresh(now_ms)) {
            return None;
        }
        // The strike that would reach the threshold is Redis's to count:
        // spends on other nodes may have taken back strikes this node still
        // counts (a paying client is never blocked for them).
        let threshold = rules.strikes.map_or(0, |s| s.threshold);
        if redis_up && threshold > 0 && self.strikes.saturating_add(1) >= threshold {
            return None;
        }
        self.over = self.over.saturating_add(1);
        self.unsent = self.unsent.saturating_add(1);
        let retry_after_ms = self.to_t(now_ms) as u64;
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

    /// A spend took one strike back: Redis now counts `strikes`.
    pub fn forgiven(&mut self, strikes: u32) {
        self.strikes = strikes.saturating_add(self.unsent);
    }
}

/// One client's locally counted refusals, as a worker sends them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch<C> {
    /// What the call needs (the client, its limit and rules).
    pub context: C,
    /// Counted, not sent yet.
    pub pending: u32,
    /// Sent and not acknowledged: resent as it is (same sequence number,
    /// which Redis applies once) until Redis answers.
    pub sending: Option<Sending>,
}

/// A batch on its way to Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sending {
    /// Increasing per worker: Redis applies a client's batch only if its
    /// number is above the last it applied from this worker.
    pub seq: u64,
    pub count: u32,
    /// Submitted and waiting for the reply (not resent meanwhile).
    pub in_flight: bool,
}

/// A worker's batches, by client (and limit). Exact: a refusal is in one
/// batch only, a batch is resent until acknowledged, and Redis applies a
/// batch once whatever how often it arrives.
#[derive(Debug)]
pub struct Batches<C> {
    batches: HashMap<Vec<u8>, Batch<C>>,
    seq: u64,
}

impl<C> Default for Batches<C> {
    fn default() -> Self {
        Self {
            batches: HashMap::new(),
            seq: 0,
        }
    }
}

impl<C: Clone> Batches<C> {
    /// Counts one refusal of `key`.
    pub fn add(&mut self, key: &[u8], context: impl FnOnce() -> C) {
        match self.batches.get_mut(key) {
            Some(batch) => batch.pending = batch.pending.saturating_add(1),
            None => {
                self.batches.insert(
                    key.to_vec(),
                    Batch {
                        context: context(),
                        pending: 1,
                        sending: None,
                    },
                );
            }
        }
    }

    /// Whether refusals of `key` wait to be sent or acknowledged.
    pub fn holds(&self, key: &[u8]) -> bool {
        self.batches.contains_key(key)
    }

    /// Whether anything waits to be sent or acknowledged.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Refusals counted and not acknowledged yet.
    pub fn unacknowledged(&self) -> u64 {
        self.batches
            .values()
            .map(|b| u64::from(b.pending) + u64::from(b.sending.map_or(0, |s| s.count)))
            .sum()
    }

    /// The batch of `key` to submit now, if there is one and none of its
    /// is in flight: a batch that failed is resent as it was, else the
    /// pending refusals become a new one.
    pub fn take(&mut self, key: &[u8]) -> Option<(Sending, C)> {
        let batch = self.batches.get_mut(key)?;
        let sending = match batch.sending {
            Some(s) if s.in_flight => return None,
            Some(s) => s,
            None if batch.pending == 0 => return None,
            None => {
                self.seq += 1;
                let count = core::mem::take(&mut batch.pending);
                Sending {
                    seq: self.seq,
                    count,
                    in_flight: false,
                }
            }
        };
        batch.sending = Some(Sending {
            in_flight: true,
            ..sending
        });
        Some((sending, batch.context.clone()))
    }

    /// Batches submitted and waiting for their reply.
    pub fn in_flight(&self) -> usize {
        self.batches
            .values()
            .filter(|b| b.sending.is_some_and(|s| s.in_flight))
            .count()
    }

    /// Every key with a batch to submit now.
    pub fn due(&self) -> Vec<Vec<u8>> {
        self.batches
            .iter()
            .filter(|(_, b)| match b.sending {
                Some(s) => !s.in_flight,
                None => b.pending > 0,
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Redis applied (or had applied) batch `seq` of `key`.
    pub fn acknowledged(&mut self, key: &[u8], seq: u64) {
        let Some(batch) = self.batches.get_mut(key) else {
            return;
        };
        if batch.sending.is_some_and(|s| s.seq == seq) {
            batch.sending = None;
        }
        if batch.pending == 0 && batch.sending.is_none() {
            self.batches.remove(key);
        }
    }

    /// Batch `seq` of `key` got no answer (or could not be submitted):
    /// whether Redis applied it is unknown, so it is sent again as it is.
    pub fn failed(&mut self, key: &[u8], seq: u64) {
        if let Some(Batch {
            sending: Some(s), ..
        }) = self.batches.get_mut(key)
        {
            if s.seq == seq {
                s.in_flight = false;
            }
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

/// The block the strike that tripped the breaker opened, for the node to
/// keep (the next request is blocked, not refused once more): the strike
/// TTL, or the ban's when it banned.
pub fn opened_block(breaker: &BreakerStatus, rules: BreakerRules) -> Option<BreakerStatus> {
    let (block, block_ms) = match (breaker.tripped?, rules.ban) {
        (Tripped::Banned, Some(ban)) => (Block::Banned, ban.ttl_ms),
        _ => (Block::Blocked, rules.strikes?.ttl_ms),
    };
    Some(BreakerStatus {
        strikes: breaker.strikes,
        block,
        block_ms,
        tripped: None,
    })
}

/// The key of a client's refusal under `limit` (zone entry and batch):
/// the Redis it came from (`scope`, [`scope`]), the limit, the counter
/// (exact or approximate) and the client key.
pub fn refusal_key(scope: u64, limit: RateLimit, approx: bool, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(21 + key.len());
    out.push(u8::from(approx));
    out.extend_from_slice(&scope.to_le_bytes());
    out.extend_from_slice(&limit.requests.to_le_bytes());
    out.extend_from_slice(&limit.window_ms.to_le_bytes());
    out.extend_from_slice(key);
    out
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
    h
}

#[cfg(test)]
mod tests;

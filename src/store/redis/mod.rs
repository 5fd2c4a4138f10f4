//! Cluster mode: the store in Redis (docs/operations.md, "Sizing Redis").
//! One script call per shielded request (the check: the limit and the
//! client's breaker at once), one per spent challenge, one per trap hit or
//! replay; all pipelined on this worker's connection. What is sent and
//! what the answers mean is the core's (`pow_shield_core::cluster::calls`);
//! this file asks and delivers.
//!
//! Around it, one concern a file: `start.rs` (the handshake, the router),
//! `generation.rs` (the data generation a challenge carries and a spend
//! must fall in), `node_cache.rs` (what the node keeps in the zone beside
//! Redis), `batches.rs` (local refusals and their batches), `coalesce.rs`
//! (a client's burst in one call), `outage.rs` (spends written to Redis
//! after an outage). What Redis does not answer the fallback rule decides
//! (`crate::store::Late`).

mod admin;
mod batches;
mod coalesce;
mod generation;
mod node_cache;
mod outage;
mod start;

use core::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};

use nginx_sys::ngx_log_t;
use redis_protocol::resp2::types::OwnedFrame;

pub use self::node_cache::NodeCache;
use super::{Failure, NewLate, NewWaiter, Poll, Replay};
use crate::ffi::{monotonic_ms, now_ms};
use crate::redis::client::Unavailable;
use crate::redis::router::{OnFrame, Rebuild, Router};
use batches::{BatchContext, BatchTimer};
use coalesce::Group;
use pow_shield_core::cluster::calls::{self, Call, Calls};
use pow_shield_core::cluster::fallback::{self, Answer, Known};
use pow_shield_core::cluster::generation::slot_of_tag;
use pow_shield_core::cluster::refusals::{refusal_key, Batches};
use pow_shield_core::cluster::replays::Replays;
use pow_shield_core::cluster::tracker::Tracker;
use pow_shield_core::limiter::breaker::{opened_block, Block, BreakerRules, BreakerStatus};
use pow_shield_core::limiter::{RateLimit, Spent, Verdict};
use pow_shield_core::redis::command::client_tag;
use pow_shield_core::store::{Checked, Offence, Op, Reply, Solution, Struck, Subject};
use pow_shield_core::syntax::FailPolicy;

/// Spends kept per worker for Redis: an outage of minutes at a high solve
/// rate. Beyond it a token is dropped (counted, logged once): the node that
/// spent it still refuses it; only other nodes could accept it once more.
const MAX_REPLAYS: usize = 4096;

/// The Redis store of one worker.
pub struct RedisStore {
    router: Router,
    /// What this worker sends for each operation (keys, scripts of its
    /// mode, sorted-set members).
    calls: Calls,
    /// What the refusals this store learns are about (`refusals::scope`).
    scope: u64,
    /// A Redis Cluster: a spent record lives in its client's slot, and the
    /// data generation is the slot's.
    cluster: bool,
    /// Makes sorted-set members unique within this worker.
    seq: Cell<u64>,
    /// What the node keeps in the zone beside Redis (none if nginx could
    /// not map the zone).
    cache: Option<NodeCache>,
    /// What this worker knows of the data generations (generation.rs),
    /// and this node's own generation (challenges issued during an outage).
    generations: RefCell<Tracker>,
    local_generation: u64,
    /// Spends Redis could not take, to write when it answers again.
    replays: RefCell<Replays>,
    /// Refusals decided here, each client's to send to Redis in one call
    /// (batches.rs).
    batches: RefCell<Batches<BatchContext>>,
    batch_timer: BatchTimer,
    /// Since when the worker, exiting, waits for Redis to take its batches.
    exiting_since: Cell<Option<u64>>,
    /// The checks on their way to Redis that later requests of the same
    /// client join (coalesce.rs).
    groups: RefCell<HashMap<Vec<u8>, Group>>,
    /// A connection was ready before: the next one follows an outage.
    connected_once: Cell<bool>,

    log: *mut ngx_log_t,
    me: Weak<RedisStore>,
}

impl RedisStore {
    pub fn retry_in_ms(&self) -> Option<u64> {
        self.router.retry_in_ms()
    }

    /// Whether an unpaid refusal of client `key` counts a strike now: not
    /// within a grace after an outage (`health::RECOVERY_GRACE_MS`).
    pub fn strikes_unpaid(&self, key: &[u8]) -> bool {
        match self.cluster {
            true => self.router.strikes_unpaid(client_tag(key).as_bytes()),
            false => self.router.strikes_unpaid(b""),
        }
    }

    /// The worker exits (`exit_process`): what Redis did not take of its
    /// batches is given up (logged), the connections closed.
    pub fn shutdown(&self) {
        self.batch_timer.cancel();
        self.give_up_batches();
        self.router.shutdown();
    }

    /// Asks Redis for `op`; what Redis does not take now comes back with
    /// what `late` makes (`Poll::Failed`), and a failure later is decided
    /// through the waiter, which keeps it (`Waiter::fall_back`). An answer
    /// at once (a block the node knows, a local refusal) makes neither;
    /// the node gives one only as `fallback::node_answers` says for
    /// `fail` (while Redis is unavailable, `pow_shield_fail` decides).
    pub fn ask(
        &self,
        op: Op,
        subject: &Subject,
        fail: FailPolicy,
        late: &mut NewLate,
        waiter: &mut NewWaiter,
    ) -> Poll {
        match op {
            // (The decision checks only where a limit is set.)
            Op::Check { .. } if subject.limits.is_empty() => Poll::Ready(Reply::Checked(Checked {
                verdict: Verdict {
                    allowed: true,
                    ..Default::default()
                },
                ..Checked::default()
            })),
            Op::Check { offence } => self.check(subject, offence, fail, late, waiter),
            Op::Spend(solution) => self.spend(subject, solution, late, waiter),
            Op::Forgive(_) => self.forgive(late),
            Op::Strike => self.strike(subject, fail, late, waiter),
        }
    }

    fn check(
        &self,
        subject: &Subject,
        offence: Offence,
        fail: FailPolicy,
        late: &mut NewLate,
        waiter: &mut NewWaiter,
    ) -> Poll {
        let rules = subject.rules;
        // A block this node learnt from Redis holds without asking again
        // (blocked requests change nothing there): blocking stays cheap.
        if let Some(breaker) = self.standing_block(subject.key, rules, fail) {
            return Poll::Ready(Reply::Checked(Checked {
                breaker,
                ..Checked::default()
            }));
        }
        let (limits, cluster) = (subject.limits, self.cluster);
        // Stacked or keyed limits: all of them in one call, decided in
        // Redis (neither refused locally nor coalesced).
        let Some(limit) = single_limit(subject) else {
            let tag = client_tag(subject.key);
            let remember = self.block_keeper(subject.key, rules);
            let counted = calls::counted(subject);
            let call = self
                .calls
                .check(tag.as_bytes(), subject, offence, 1, self.next_seq());
            return self.call_script(
                call,
                tag.as_bytes(),
                late,
                waiter,
                move |reply| {
                    let (kept, at) = (&counted.0, &counted.1);
                    let checked =
                        calls::stacked_checked(cluster, &reply?, (kept, at), rules, offence)?;
                    remember(checked.breaker);
                    Some(Reply::Checked(checked))
                },
                || {},
            );
        };
        // Refused by Redis until a moment still ahead: refused here, unless
        // it pays (a spend must be global), or Redis's word is not to be
        // had now (`pow_shield_fail` decides).
        if offence == Offence::Unpaid && self.node_answers(Known::Refusal, subject.key, fail) {
            if let Some(refused) = self.refuse_locally(subject, limit) {
                return Poll::Ready(Reply::Checked(refused.checked));
            }
        }
        // What this worker counted for the client goes first: Redis decides
        // this request on every strike (the one reaching the threshold is
        // Redis's to count).
        self.send_batch_now(subject);
        let tag = client_tag(subject.key);
        let remember = self.block_keeper(subject.key, rules);
        let asked_ms = monotonic_ms();
        let refusal = self
            .cache
            .is_some()
            .then(|| refusal_key(self.scope, limit, subject.approx, subject.key));
        // A request of a client whose check is on its way joins it: the
        // call's answer decides it (coalesce.rs).
        let coalesce = offence == Offence::Unpaid && !subject.approx;
        if let (Some(refusal), true) = (&refusal, coalesce) {
            if self.join(refusal, rules, subject.rising, late, waiter) {
                return Poll::Pending;
            }
        }
        let group = refusal.clone().filter(|_| coalesce);
        let opened = group.clone();
        let (store, key) = (self.me.clone(), subject.key.to_vec());
        let slot = slot_of_tag(tag.as_bytes());
        let answered = Rc::new(Cell::new(false));
        let (was_answered, releaser) = (answered.clone(), store.clone());
        // The requests that joined this one are decided once it has its
        // answer (the fallback's too, in arrival order).
        let release = move || {
            if let (Some(group), Some(store)) = (&group, releaser.upgrade()) {
                store.release(group, &key, limit, rules, was_answered.get());
            }
        };
        let on_reply = move |reply: Option<Vec<i64>>| {
            let checked = calls::checked(cluster, &reply?, &limits, rules, offence);
            answered.set(checked.is_some());
            let checked = checked?;
            // The strike that opened the breaker: the next request is
            // blocked here, not refused once more.
            let keep = opened_block(&checked.breaker, rules).unwrap_or(checked.breaker);
            remember(keep);
            if let Some(store) = store.upgrade() {
                store.note_slot_generation(slot, checked.generation);
                if let Some(refusal) = &refusal {
                    match (checked.verdict.allowed, keep.block) {
                        (false, Block::Clear) => store.learn_refusal(
                            refusal,
                            &checked.verdict,
                            &checked.breaker,
                            asked_ms,
                        ),
                        (_, Block::Clear) => {}
                        // Once the block ends Redis decides again.
                        _ => store.forget_refusal(refusal),
                    }
                }
            }
            Some(Reply::Checked(checked))
        };
        let call = self
            .calls
            .check(tag.as_bytes(), subject, offence, 1, self.next_seq());
        let poll = self.call_script(call, tag.as_bytes(), late, waiter, on_reply, release);
        if let (Poll::Pending, Some(refusal)) = (&poll, &opened) {
            self.open_group(refusal, rules, subject.rising);
        }
        poll
    }

    fn strike(
        &self,
        subject: &Subject,
        fail: FailPolicy,
        late: &mut NewLate,
        waiter: &mut NewWaiter,
    ) -> Poll {
        let (key, rules) = (subject.key, subject.rules);
        if let Some(breaker) = self.standing_block(key, rules, fail) {
            return Poll::Ready(Reply::Struck(Struck {
                breaker,
                struck: false,
            }));
        }
        let tag = client_tag(key);
        let remember = self.block_keeper(key, rules);
        let refusal = single_limit(subject)
            .filter(|_| self.cache.is_some())
            .map(|limit| refusal_key(self.scope, limit, subject.approx, key));
        let store = self.me.clone();
        let call = self.calls.strike(tag.as_bytes(), rules);
        self.call_script(
            call,
            tag.as_bytes(),
            late,
            waiter,
            move |reply| {
                let reply = calls::struck_reply(&reply?, rules)?;
                if let Reply::Struck(Struck { breaker, .. }) = reply {
                    // The strike that opened the breaker: blocked here from the
                    // next request on (not refused once more).
                    let keep = opened_block(&breaker, rules).unwrap_or(breaker);
                    remember(keep);
                    if let (Some(refusal), Some(store), false) =
                        (&refusal, store.upgrade(), keep.block == Block::Clear)
                    {
                        store.forget_refusal(refusal);
                    }
                }
                Some(reply)
            },
            || {},
        )
    }

    fn spend(
        &self,
        subject: &Subject,
        solution: Solution,
        late: &mut NewLate,
        waiter: &mut NewWaiter,
    ) -> Poll {
        let (digest, expires_at_ms, now_ms) = (solution.digest, solution.spent_until_ms, now_ms());
        let spent_key = self.calls.spent_key(&digest, subject.key);
        let tag = client_tag(subject.key);
        // Spent here already (while Redis was down or busy): a replay, and
        // nothing to take back; Redis learns of it from the queue.
        if self.spent_locally(&digest, now_ms) {
            self.queue_replay(&digest, spent_key, tag, expires_at_ms);
            return Poll::Ready(Reply::Spent(Spent::Replayed));
        }
        // The strikes this worker counted for the client go first: the
        // spend takes one of them back.
        self.send_batch_now(subject);
        let refusal = single_limit(subject)
            .filter(|_| self.cache.is_some())
            .map(|limit| refusal_key(self.scope, limit, subject.approx, subject.key));
        let remember = self.block_keeper(subject.key, subject.rules);
        let (key, rules) = (subject.key.to_vec(), subject.rules);
        // Within Redis's generation (a Redis Cluster: the slot's),
        // atomically; a challenge issued here during an outage is spent as
        // before: the zone has its spend.
        let in_generation = self.generations().spent_in(solution.generation);
        let call = self.calls.spend(
            &spent_key,
            tag.as_bytes(),
            &solution,
            rules,
            in_generation,
            now_ms,
        );
        let store = self.me.clone();
        let slot = slot_of_tag(tag.as_bytes());
        self.call_script(
            call,
            spent_key.as_bytes(),
            late,
            waiter,
            move |reply| {
                let store = store.upgrade();
                let spent = match calls::spent_reply(&reply?) {
                    Ok(spent) => spent?,
                    // The generation is gone (a flush, a failover): what was
                    // spent in it is unknown, so this is not accepted (409 with
                    // a fresh challenge); the next challenges carry the new
                    // generation (a slot's is in the reply).
                    Err(renewed) => {
                        if let Some(store) = &store {
                            store.generation_gone(slot, renewed);
                        }
                        return Some(Reply::Spent(Spent::Stale(renewed)));
                    }
                };
                Some(Reply::Spent(match spent {
                    // First in Redis, but maybe spent here while Redis was down
                    // (and not written to it yet, or dropped from the queue).
                    Spent::Accepted(breaker) => {
                        if let (Some(cache), Some(refusal)) =
                            (store.as_ref().and_then(|s| s.cache.as_ref()), &refusal)
                        {
                            cache.refusal_forgiven(refusal, breaker.strikes);
                        }
                        let first = store.is_none_or(|s| {
                            s.record_locally(&digest, expires_at_ms, now_ms, &key, rules)
                        });
                        match first {
                            true => Spent::Accepted(breaker),
                            false => Spent::Replayed,
                        }
                    }
                    Spent::Blocked(breaker) => {
                        remember(breaker);
                        Spent::Blocked(breaker)
                    }
                    spent @ (Spent::Replayed | Spent::Stale(_) | Spent::Unavailable) => spent,
                }))
            },
            || {},
        )
    }

    /// A solution of Redis's generation while Redis is unavailable: the
    /// fallback rule may have the zone record it, to be written to Redis
    /// (`replay_later`), whose write takes back its 429's strike there.
    /// While Redis answers, nothing (the fresh challenge pays it back).
    fn forgive(&self, late: &mut NewLate) -> Poll {
        if self.router.is_healthy() || self.cache.is_none() {
            return Poll::Ready(Reply::Spent(Spent::Unavailable));
        }
        Poll::Failed(Failure::Down, late())
    }

    /// The zone spent (or recorded) a token for Redis: written to Redis
    /// once it takes commands again.
    pub fn replay_later(&self, replay: &Replay) {
        let digest = &replay.solution.digest;
        let spent_key = self.calls.spent_key(digest, &replay.key);
        let tag = client_tag(&replay.key);
        self.queue_replay(digest, spent_key, tag, replay.solution.spent_until_ms);
    }

    fn next_seq(&self) -> u64 {
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        seq
    }

    /// Sends `call` (by SHA, resent as EVAL if Redis lost the script),
    /// routed by `slot_key` in a Redis Cluster (a key of the call, or the
    /// client's hash tag they all share).
    fn send(&self, slot_key: &[u8], call: Call, on_reply: OnFrame) -> Result<(), Unavailable> {
        let evalsha = call.evalsha.clone();
        // Only used if Redis lost the script (SCRIPT FLUSH, a restart).
        let eval: Rebuild = Rc::new(move || call.eval());
        self.router.submit(slot_key, evalsha, Some(eval), on_reply)
    }

    /// Runs `call` and delivers what `on_reply` makes of its integers; a
    /// failure (`None` from `on_reply`, or none of ours) is the fallback
    /// rule's, through the waiter. `then` runs once the request has its
    /// answer (the requests that joined it are decided after it).
    fn call_script(
        &self,
        call: Call,
        slot_key: &[u8],
        late: &mut NewLate,
        waiter: &mut NewWaiter,
        on_reply: impl FnOnce(Option<Vec<i64>>) -> Option<Reply> + 'static,
        then: impl FnOnce() + 'static,
    ) -> Poll {
        self.write_replays();
        let waiter = waiter();
        waiter.keep(late());
        let (held, store) = (waiter.clone(), self.me.clone());
        let on_reply = Box::new(move |frame: Option<OwnedFrame>| {
            // An expired call is decided as a timed-out one that Redis
            // never ran (`fallback::Answer`).
            let answer = Answer::of(frame.as_ref());
            let ran = answer.may_have_run();
            match on_reply(answer.integers()) {
                Some(reply) => waiter.deliver(reply),
                None => {
                    let replay = waiter.fall_back(Failure::Down, ran);
                    if let (Some(replay), Some(store)) = (replay, store.upgrade()) {
                        store.replay_later(&replay);
                    }
                }
            }
            then();
        });
        match self.send(slot_key, call, on_reply) {
            Ok(()) => Poll::Pending,
            Err(unavailable) => match held.take_late() {
                Some(late) => Poll::Failed(failure(unavailable), late),
                // (Kept above; nothing else takes it.)
                None => Poll::Ready(Reply::Down),
            },
        }
    }

    /// A block of `key` this node learnt from Redis and that still holds.
    pub(in crate::store) fn known_block(
        &self,
        key: &[u8],
        rules: BreakerRules,
    ) -> Option<BreakerStatus> {
        self.cache.as_ref()?.blocked(key, rules, monotonic_ms())
    }

    /// A known block that answers the request now (under `open`, only
    /// while Redis answers).
    fn standing_block(
        &self,
        key: &[u8],
        rules: BreakerRules,
        fail: FailPolicy,
    ) -> Option<BreakerStatus> {
        self.known_block(key, rules)
            .filter(|_| self.node_answers(Known::Block, key, fail))
    }

    /// Whether the node answers for the client `key` from what Redis told
    /// it (`known`), given what the connection its call would take knows
    /// of Redis now: the one rule, `fallback::node_answers`.
    fn node_answers(&self, known: Known, key: &[u8], fail: FailPolicy) -> bool {
        let reach = match self.cluster {
            true => self.router.reach(client_tag(key).as_bytes()),
            false => self.router.reach(key),
        };
        fallback::node_answers(known, reach, fail)
    }

    /// What a reply does with a block Redis reports: the zone keeps it for
    /// as long as it lasts.
    fn block_keeper(
        &self,
        key: &[u8],
        rules: BreakerRules,
    ) -> impl FnOnce(BreakerStatus) + 'static {
        let cache = self.cache.clone();
        let key = (rules.strikes.is_some() || rules.ban.is_some()).then(|| key.to_vec());
        move |breaker| {
            if let (Some(cache), Some(key)) = (cache, key) {
                cache.remember(&key, breaker, rules, monotonic_ms());
            }
        }
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        self.batch_timer.cancel();
    }
}

/// Why the router did not take a call.
fn failure(unavailable: Unavailable) -> Failure {
    match unavailable {
        Unavailable::Down => Failure::Down,
        Unavailable::Busy => Failure::Busy,
    }
}

/// The location's one limit per client key; `None` without a limit, with
/// stacked limits or a `key=` (those are decided in Redis: neither refused
/// locally nor coalesced).
fn single_limit(subject: &Subject) -> Option<RateLimit> {
    calls::single_limit(subject)
}

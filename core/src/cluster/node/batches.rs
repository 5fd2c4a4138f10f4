//! Local refusals and their batches: a client Redis refused until `T` is
//! refused by the node itself until then (the refusal is in the zone:
//! every worker, across reloads), and each such refusal is a strike
//! counted at once in the zone. The worker sends its refusals to Redis in
//! one call per client (several clients per call on one Redis), on a
//! timer every `BATCH_MS` and at once before it asks Redis about the
//! client; a batch Redis did not answer is resent as it was (Redis applies
//! it once), and a worker that exits keeps its timer until Redis took them,
//! as long as `fallback::exit_waits` says (never while Redis is down: then
//! the timer is cancelable, so that nginx stops and reloads at once).

use super::{
    blocked, remember, Alert, Around, BlockOf, ClusterNode, Command, Flight, Held, Look, Looked,
    Step, Waits,
};
use crate::cluster::calls::{single_limit, BatchOf};
use crate::cluster::fallback::{exit_waits, Reach};
use crate::cluster::refusals::{
    refusal_key, RefusalKey, Refused, Sending, BATCH_MS, PRICE_BATCH_MS,
};
use crate::cluster::scripts::{args, replies};
use crate::limiter::breaker::{Block, BreakerRules};
use crate::limiter::RateLimit;
use crate::redis::command::{Frame, Tag};
use crate::store::{Checked, Now, Subject};

/// Batch calls waiting for Redis at most: well under the client's cap of
/// commands in flight (1024).
pub const BATCH_CALLS_IN_FLIGHT: usize = 8;

/// What a batch's call needs.
#[derive(Clone, Debug)]
pub(super) struct BatchContext {
    limit: RateLimit,
    rules: BreakerRules,
    key: Vec<u8>,
}

impl BatchContext {
    /// How often the client's refusals go: strikes at every tick, counts
    /// only a rising price reads at `PRICE_BATCH_MS`.
    fn every(&self) -> u64 {
        match self.rules.strikes {
            Some(_) => 0,
            None => PRICE_BATCH_MS,
        }
    }

    pub(super) fn of(subject: &Subject, limit: RateLimit) -> Self {
        Self::new(limit, subject.rules, subject.key.to_vec())
    }

    /// The batch of `key`'s count (a client's, or `OWN_KEY` and a `key=`
    /// value: its tag is the value's own), whose breaker (if `rules` has
    /// one) is `key`'s.
    pub(super) fn new(limit: RateLimit, rules: BreakerRules, key: Vec<u8>) -> Self {
        Self { limit, rules, key }
    }
}

/// A batch call on its way: each client's refusal key, what it carries,
/// and what a block in its answer is kept for.
pub(super) struct BatchCall {
    sent: Vec<(RefusalKey, Sending, BatchContext)>,
}

impl<W: Waits> ClusterNode<W> {
    /// An unpaid request of a client Redis refused until a `T` still
    /// ahead: refused here, its strike counted now and sent later.
    pub(super) fn refuse_locally(
        &mut self,
        env: &mut impl Around,
        subject: &Subject,
        (limit, slot): (RateLimit, impl FnOnce() -> u16),
        now: Now,
        out: &mut Vec<Step<W>>,
    ) -> Option<Checked> {
        if !env.has_zone() {
            return None;
        }
        // A Redis Cluster: the challenge carries the slot's generation, so
        // only once this worker knows it (else Redis decides, and says it).
        let generation = match self.cluster {
            true => Some(self.generations.slot(slot())?),
            false => None,
        };
        let refusal = refusal_key(self.scope, limit, subject.limits.approx(0), subject.key);
        // Redis owes this worker an answer for the client: what it said
        // last still holds (asking would only wait). (While Redis is
        // unavailable the refusal says no: the fallback rule decides.)
        let stale_ok = self.batches.awaiting(&refusal);
        let (rules, rising) = (subject.rules, subject.rising);
        let refused = env.refuse(&refusal, rules, now.monotonic_ms, stale_ok, rising)?;
        let whose = (subject, limit, &refusal);
        Some(self.refused_locally(env, whose, refused, generation, out))
    }

    /// What the node holds of a request under the location's one limit (a
    /// node with a zone; `refusal`, its refusal's key), looked at once
    /// before it asks Redis: with `refuse` (an unpaid request the node may
    /// answer), refused here as [`Self::refuse_locally`] refuses (`slot`:
    /// the client's); else what the node counted for the client goes
    /// now, as [`Self::send_batch_now`] sends it. First the block of
    /// `block`'s client, which answers while it holds.
    pub(super) fn look_locally(
        &mut self,
        env: &mut impl Around,
        (subject, limit, refusal): (&Subject, RateLimit, &RefusalKey),
        (slot, refuse, block): (u16, bool, BlockOf),
        now: Now,
        out: &mut Vec<Step<W>>,
    ) -> Option<Checked> {
        let generation = match self.cluster && refuse {
            true => self.generations.slot(slot),
            false => None,
        };
        let look = Look {
            refusal,
            rules: &subject.rules,
            stale_ok: self.batches.awaiting(refusal),
            held: Held::NEVER,
        };
        let refuse = refuse && (generation.is_some() || !self.cluster);
        let mut pending = [0];
        let at_now = (now.monotonic_ms, subject.rising);
        match env.look(&[look], at_now, (refuse, block), &mut pending) {
            Some((_, Looked::Refused(refused))) => {
                let whose = (subject, limit, refusal);
                return Some(self.refused_locally(env, whose, refused, generation, out));
            }
            Some((_, Looked::Blocked(breaker))) => return Some(blocked(breaker)),
            Some((_, Looked::Held)) | None => {}
        }
        let [n] = pending;
        if n > 0 {
            self.batches
                .add(refusal, n, || BatchContext::of(subject, limit));
        }
        self.send_batches(env, std::slice::from_ref(refusal), now, out);
        None
    }

    /// A request refused here under its one limit (`generation`: its
    /// slot's, a Redis Cluster's).
    fn refused_locally(
        &mut self,
        env: &mut impl Around,
        (subject, limit, refusal): (&Subject, RateLimit, &RefusalKey),
        refused: Refused,
        generation: Option<u64>,
        out: &mut Vec<Step<W>>,
    ) -> Checked {
        // The refusal waits in the zone: this worker's timer takes it, or
        // any worker that asks Redis about the client first. (Redis needs
        // it only as a strike or for rising difficulty.)
        if subject.rules.strikes.is_some() || subject.rising {
            self.batches
                .add(refusal, 0, || BatchContext::of(subject, limit));
            self.arm(env, BATCH_MS, true, out);
        }
        Checked {
            generation,
            ..refused.checked
        }
    }

    /// Sends what the node counted for the client now (whichever worker
    /// counted it), before a call that asks Redis about the client: a
    /// check then decides on every strike the node counted (the one
    /// reaching the threshold trips on time), a spend finds the strike it
    /// takes back.
    pub(super) fn send_batch_now(
        &mut self,
        env: &mut impl Around,
        subject: &Subject,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let Some(limit) = single_limit(subject) else {
            return;
        };
        if !env.has_zone() {
            return;
        }
        let refusal = refusal_key(self.scope, limit, subject.limits.approx(0), subject.key);
        let n = env.take_pending(&refusal);
        if n > 0 {
            self.batches
                .add(&refusal, n, || BatchContext::of(subject, limit));
        }
        self.send_batches(env, std::slice::from_ref(&refusal), now, out);
    }

    /// A connection to Redis is ready. After an outage Redis may have
    /// lost its data (a restart without persistence): the node forgets the
    /// refusals it learnt (the next request of each client asks again).
    /// The spends the fallback made go first, then the refusals counted
    /// before the outage: the spends take back the strikes Redis holds, and
    /// the batch's strikes never meet those Redis would have taken back
    /// already (a paying client's breaker must not open in between).
    pub fn connected(&mut self, env: &mut impl Around, now: Now, out: &mut Vec<Step<W>>) {
        self.ask_generation(now, out);
        self.write_replays(env, now, out);
        if std::mem::replace(&mut self.connected_once, true) {
            env.forget_refusals(now.monotonic_ms);
        }
        for key in self.batches.keys() {
            let n = env.take_pending(&key);
            self.batches.take_more(&key, n);
        }
        let due = self.batches.due(now.monotonic_ms, |_| 0);
        for refusals in due.chunks(self.per_call()) {
            self.send_batches(env, refusals, now, out);
        }
    }

    /// The batch timer: every due batch (one call for up to
    /// `args::BATCH_CLIENTS` clients on one Redis, one per client on a
    /// Redis Cluster), with at most `BATCH_CALLS_IN_FLIGHT` calls waiting
    /// for Redis (the rest 10 ms later, so that thousands of refused
    /// clients never fill the queue the requests' commands wait in); again
    /// in `BATCH_MS` while any waits. `exiting`: the worker exits.
    pub fn tick(&mut self, env: &mut impl Around, now: Now, exiting: bool, out: &mut Vec<Step<W>>) {
        let per_call = self.per_call();
        // What the zone holds for the clients this worker refused.
        for key in self.batches.keys() {
            let n = env.take_pending(&key);
            self.batches.take_more(&key, n);
            self.batches.settle(&key);
        }
        let mut due = self.batches.due(now.monotonic_ms, BatchContext::every);
        let room = (BATCH_CALLS_IN_FLIGHT * per_call).saturating_sub(self.batches.in_flight());
        let more = due.len() > room;
        due.truncate(room);
        for refusals in due.chunks(per_call) {
            self.send_batches(env, refusals, now, out);
        }
        if more {
            return self.arm(env, BATCH_MS / 10, false, out);
        }
        if self.batches.is_empty() {
            self.exiting_since = None;
            return;
        }
        if exiting {
            let since = *self.exiting_since.get_or_insert(now.monotonic_ms);
            if !exit_waits(now.monotonic_ms.saturating_sub(since), batch_reach(env)) {
                return self.give_up(out);
            }
        }
        self.arm(env, BATCH_MS, true, out);
    }

    /// Gives up what Redis did not take of this worker's batches (it
    /// exits).
    pub fn give_up(&mut self, out: &mut Vec<Step<W>>) {
        let lost = self.batches.drop_all();
        if lost > 0 {
            out.push(Step::Alert(Alert::BatchesLost { lost }));
        }
    }

    /// One Redis: many clients per call; a Redis Cluster: one each.
    fn per_call(&self) -> usize {
        match self.cluster {
            true => 1,
            false => args::BATCH_CLIENTS,
        }
    }

    /// The batch timer, in `in_ms`: while Redis is down the batches cannot
    /// go, so it does not hold a worker that exits (`exit_waits`).
    pub(super) fn arm(
        &self,
        env: &mut impl Around,
        in_ms: u64,
        if_unset: bool,
        out: &mut Vec<Step<W>>,
    ) {
        out.push(Step::Timer {
            in_ms,
            if_unset,
            cancelable: !exit_waits(0, batch_reach(env)),
        });
    }

    /// Sends the due batches of `refusals` in one call (one Redis; a Redis
    /// Cluster: the caller passes one, the keys of one client share a
    /// slot).
    #[inline]
    pub(super) fn send_batches(
        &mut self,
        env: &mut impl Around,
        refusals: &[RefusalKey],
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        // (No batch kept: nothing to send, nothing to look up; asked
        // where it is called, measured: a call per limit a request.)
        if !self.batches.is_empty() {
            self.send_kept_batches(env, refusals, now, out);
        }
    }

    /// [`Self::send_batches`] while some batch is kept.
    fn send_kept_batches(
        &mut self,
        _env: &mut impl Around,
        refusals: &[RefusalKey],
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let sent: Vec<_> = refusals
            .iter()
            .filter_map(|r| {
                let (sending, ctx) = self.batches.take(r, now.monotonic_ms)?;
                Some((r.clone(), sending, ctx))
            })
            .collect();
        // (A `key=` value's key is `OWN_KEY` and the value: its tag the
        // value's own, whatever the client's slot.)
        let tags: Vec<Tag> = sent
            .iter()
            .map(|(_, _, c)| self.calls.tag(&c.key))
            .collect();
        let Some(route) = tags.first().map(|t| t.to_vec()) else {
            return;
        };
        let of: Vec<BatchOf> = sent
            .iter()
            .zip(&tags)
            .map(|((_, sending, ctx), tag)| BatchOf {
                tag,
                limit: ctx.limit,
                rules: ctx.rules,
                sending: *sending,
            })
            .collect();
        let call = self.calls.batch(&of);
        self.send(
            Flight::Batch(BatchCall { sent }),
            route,
            Command::Script(call),
            out,
        );
    }

    /// The reply to a batch call.
    pub(super) fn batch_answered(
        &mut self,
        env: &mut impl Around,
        b: BatchCall,
        frame: Option<&Frame>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let replies = match frame.and_then(Frame::bulk_string) {
            Some(text) => replies::batch_text(text),
            _ => None,
        }
        .and_then(|r| replies::batches_from_reply(&r, b.sent.len()).ok());
        let Some(replies) = replies else {
            // Applied or not, Redis applies each batch once: sent again.
            return self.batch_failed(b, out, env);
        };
        for ((refusal, sending, ctx), (over, breaker)) in b.sent.into_iter().zip(replies) {
            let newly = self.batches.acknowledged(&refusal, sending);
            let counts = (newly, over, breaker.strikes);
            env.refusals_sent(&refusal, counts, now.monotonic_ms);
            // Blocked (maybe by another node): blocked here too from now
            // on, and Redis decides once it ends.
            if breaker.block != Block::Clear {
                env.forget_refusal(&refusal, now.monotonic_ms);
            }
            remember(env, &ctx.key, breaker, ctx.rules, now);
        }
    }

    /// A batch call got no answer (or was not taken): sent again.
    pub(super) fn batch_failed(
        &mut self,
        b: BatchCall,
        out: &mut Vec<Step<W>>,
        env: &mut impl Around,
    ) {
        for (refusal, sending, _) in &b.sent {
            self.batches.failed(refusal, *sending);
        }
        self.arm(env, BATCH_MS, true, out);
    }
}

/// Whether the batches can go: down only while no connection takes calls
/// (in a Redis Cluster, no node).
fn batch_reach(env: &impl Around) -> Reach {
    match env.healthy() {
        true => Reach::Connected,
        false => Reach::Down,
    }
}

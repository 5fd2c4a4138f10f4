//! Local refusals and their batches in cluster mode (docs/operations.md, "What is decided
//! where"): a client Redis refused until `T` is refused by the node itself
//! until then (the cache is in the zone: every worker, across reloads), and
//! each such refusal is a strike counted at once in the zone. The worker
//! sends its refusals to Redis in one call per client, on a timer every
//! `BATCH_MS` and at once when the strikes reach the threshold; a batch
//! Redis did not answer is resent as it was (Redis applies it once), and a
//! worker that exits keeps its timer until Redis took them, as long as
//! `fallback::exit_waits` says (never while Redis is down: then the timer
//! is cancelable too, so that nginx stops and reloads at once).

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::ptr;

use nginx_sys::{ngx_event_t, ngx_msec_t};
use redis_protocol::resp2::types::OwnedFrame;

use super::RedisStore;
use crate::ffi::monotonic_ms;
use pow_shield_core::cluster::calls::BatchOf;
use pow_shield_core::cluster::fallback::{exit_waits, Reach};
use pow_shield_core::cluster::generation::slot_of_tag;
use pow_shield_core::cluster::refusals::{refusal_key, Refused, Sending, BATCH_MS, PRICE_BATCH_MS};
use pow_shield_core::cluster::scripts::{args, replies};
use pow_shield_core::limiter::breaker::{Block, BreakerRules, BreakerStatus};
use pow_shield_core::limiter::RateLimit;
use pow_shield_core::redis::command::client_tag;
use pow_shield_core::store::{Checked, Subject};

/// Batch calls waiting for Redis at most: well under the client's cap of
/// commands in flight (1024).
const BATCH_CALLS_IN_FLIGHT: usize = 8;

/// What a batch's call needs.
#[derive(Clone)]
pub(super) struct BatchContext {
    tag: String,
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

    fn of(subject: &Subject, limit: RateLimit) -> Self {
        Self {
            tag: client_tag(subject.key),
            limit,
            rules: subject.rules,
            key: subject.key.to_vec(),
        }
    }
}

/// The batch timer: an nginx event at a fixed address.
pub(super) struct BatchTimer(Box<UnsafeCell<ngx_event_t>>);

impl BatchTimer {
    pub(super) fn new() -> Self {
        // SAFETY: a zeroed ngx_event_t is nginx's initial event state.
        Self(Box::new(UnsafeCell::new(unsafe { core::mem::zeroed() })))
    }

    fn ev(&self) -> *mut ngx_event_t {
        self.0.get()
    }

    /// Stops the timer (the store goes away).
    pub(super) fn cancel(&self) {
        // SAFETY: our own event; removed from nginx's timers before its
        // store (its `data`) goes away.
        unsafe {
            if (*self.ev()).timer_set() != 0 {
                nginx_sys::ngx_del_timer(self.ev());
            }
        }
    }
}

/// The monotonic clock read now, not the loop iteration's cached time
/// (the one nginx's `ngx_current_msec` reads, `CLOCK_MONOTONIC`): a local
/// refusal must end at `T` even late in a long iteration.
pub(super) fn fresh_monotonic_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out pointer; CLOCK_MONOTONIC always exists
    // on the systems nginx runs this module on.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return monotonic_ms();
    }
    (ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64) / 1_000_000
}

impl RedisStore {
    /// Points the batch timer at this store (at its final address).
    pub(super) fn attach_timer(&self) {
        let ev = self.batch_timer.ev();
        // SAFETY: our event, not yet known to nginx; `data` is this store,
        // which cancels the timer before it goes away (`shutdown`, `Drop`).
        unsafe {
            (*ev).data = ptr::from_ref::<RedisStore>(self)
                .cast_mut()
                .cast::<c_void>();
            (*ev).handler = Some(batch_handler);
            (*ev).log = self.log;
        }
    }

    /// An unpaid request of a client Redis refused until a `T` still
    /// ahead: refused here, its strike counted now and sent later.
    pub(super) fn refuse_locally(&self, subject: &Subject, limit: RateLimit) -> Option<Refused> {
        let cache = self.cache.as_ref()?;
        let refusal = refusal_key(self.scope, limit, subject.approx, subject.key);
        // (While Redis is unavailable the refusal says no: the fallback
        // rule decides.)
        let redis_up = self.router.is_healthy();
        // A Redis Cluster: the challenge carries the slot's generation, so
        // only once this worker knows it (else Redis decides, and says it).
        let generation = match self.cluster {
            true => {
                let tag = client_tag(subject.key);
                Some(self.slot_generation(slot_of_tag(tag.as_bytes()))?)
            }
            false => None,
        };
        // Redis owes this worker an answer for the client: what it said
        // last still holds (asking would only wait).
        let stale_ok = self
            .batches
            .try_borrow()
            .is_ok_and(|b| b.awaiting(&refusal));
        let refused = cache.refuse_locally(
            &refusal,
            subject.rules,
            fresh_monotonic_ms(),
            stale_ok,
            redis_up,
            subject.rising,
        )?;
        // The refusal waits in the zone: this worker's timer takes it, or
        // any worker that asks Redis about the client first. (Redis needs
        // it only as a strike or for rising difficulty.)
        if subject.rules.strikes.is_some() || subject.rising {
            if let Ok(mut batches) = self.batches.try_borrow_mut() {
                batches.add(&refusal, 0, || BatchContext::of(subject, limit));
            }
            self.arm_batches();
        }
        Some(Refused {
            checked: Checked {
                generation,
                ..refused.checked
            },
        })
    }

    /// Takes what the zone holds of `refusal` into this worker's batch.
    fn take_pending(&self, refusal: &[u8], context: impl FnOnce() -> BatchContext) {
        let Some(cache) = &self.cache else {
            return;
        };
        let Ok(mut batches) = self.batches.try_borrow_mut() else {
            return;
        };
        let n = cache.take_pending(refusal);
        if n > 0 {
            batches.add(refusal, n, context);
        }
    }

    /// Keeps a refusal Redis sent for a check asked at `asked_ms`.
    pub(super) fn learn_refusal(
        &self,
        refusal: &[u8],
        verdict: &pow_shield_core::limiter::Verdict,
        breaker: &BreakerStatus,
        asked_ms: u64,
    ) {
        if let Some(cache) = &self.cache {
            cache.learn_refusal(refusal, verdict, breaker, asked_ms);
        }
    }

    /// A connection to Redis is ready. After an outage Redis may have
    /// lost its data (a restart without persistence): the node forgets the
    /// refusals it learnt (the next request of each client asks again);
    /// the batches waiting go now.
    pub(super) fn on_connected(&self) {
        if self.connected_once.replace(true) {
            if let Some(cache) = &self.cache {
                cache.forget_refusals();
            }
        }
        let due = match self.batches.try_borrow_mut() {
            Ok(mut batches) => {
                if let Some(cache) = &self.cache {
                    for key in batches.keys() {
                        batches.take_more(&key, cache.take_pending(&key));
                    }
                }
                batches.due(monotonic_ms(), |_| 0)
            }
            Err(_) => return,
        };
        let per_call = if self.cluster { 1 } else { args::BATCH_CLIENTS };
        for refusals in due.chunks(per_call) {
            self.send_batches(refusals);
        }
    }

    /// Forgets the client's refusal (a block supersedes it).
    pub(super) fn forget_refusal(&self, refusal: &[u8]) {
        if let Some(cache) = &self.cache {
            cache.forget_refusal(refusal);
        }
    }

    /// Sends what the node counted for the client now (whichever worker
    /// counted it), before a call that asks Redis about the client: a
    /// check then decides on every strike the node counted (the one
    /// reaching the threshold trips on time), a spend finds the strike it
    /// takes back.
    pub(super) fn send_batch_now(&self, subject: &Subject) {
        if let Some(limit) = super::single_limit(subject) {
            let refusal = refusal_key(self.scope, limit, subject.approx, subject.key);
            self.take_pending(&refusal, || BatchContext::of(subject, limit));
            self.send_batch(&refusal);
        }
    }

    fn arm_batches(&self) {
        let ev = self.batch_timer.ev();
        // SAFETY: our event (attached); reading its flag.
        if unsafe { (*ev).timer_set() } == 0 {
            self.arm_batches_in(BATCH_MS);
        }
    }

    fn arm_batches_in(&self, ms: u64) {
        let ev = self.batch_timer.ev();
        // While Redis is down the batches cannot go: the timer does not
        // hold a worker that exits (`exit_waits`).
        let cancelable = !exit_waits(0, self.batch_reach());
        // SAFETY: our event (attached); nginx reads `cancelable` only when
        // an exiting worker looks for timers to wait for; adding a timer
        // only queues it (moving it if it was set).
        unsafe {
            (*ev).set_cancelable(u32::from(cancelable));
            nginx_sys::ngx_add_timer(ev, ms as ngx_msec_t);
        }
    }

    /// Whether the batches can go: down only while no connection takes
    /// calls (in a Redis Cluster, no node).
    fn batch_reach(&self) -> Reach {
        match self.router.is_healthy() {
            true => Reach::Connected,
            false => Reach::Down,
        }
    }

    /// Gives up what Redis did not take of this worker's batches (it
    /// exits), logged with their count.
    pub(super) fn give_up_batches(&self) {
        let Ok(mut batches) = self.batches.try_borrow_mut() else {
            return;
        };
        let lost = batches.drop_all();
        if lost > 0 {
            error!(
                self.log,
                "pow_shield: redis did not take {lost} refusals counted by this worker \
                 before it exits; their strikes are lost"
            );
        }
    }

    /// The timer: every due batch (one call for up to
    /// `args::BATCH_CLIENTS` clients on one Redis, one per client on a
    /// Redis Cluster), with at most `BATCH_CALLS_IN_FLIGHT` calls
    /// waiting for Redis (the rest 10 ms later, so that
    /// thousands of refused clients never fill the queue the requests'
    /// commands wait in); again in `BATCH_MS` while any waits.
    fn on_batch_timer(&self) {
        // One Redis: many clients per call; a Redis Cluster: one each.
        let per_call = if self.cluster { 1 } else { args::BATCH_CLIENTS };
        // What the zone holds for the clients this worker refused.
        let keys = match self.batches.try_borrow() {
            Ok(batches) => batches.keys(),
            Err(_) => return self.arm_batches(),
        };
        let (due, room) = match self.batches.try_borrow_mut() {
            Ok(mut batches) => {
                for key in &keys {
                    if let Some(cache) = &self.cache {
                        batches.take_more(key, cache.take_pending(key));
                    }
                    batches.settle(key);
                }
                (
                    batches.due(monotonic_ms(), BatchContext::every),
                    (BATCH_CALLS_IN_FLIGHT * per_call).saturating_sub(batches.in_flight()),
                )
            }
            Err(_) => return self.arm_batches(),
        };
        let more = due.len() > room;
        let due = &due[..due.len().min(room)];
        for refusals in due.chunks(per_call) {
            self.send_batches(refusals);
        }
        if more {
            return self.arm_batches_in(BATCH_MS / 10);
        }
        let Ok(batches) = self.batches.try_borrow() else {
            return self.arm_batches();
        };
        if batches.is_empty() {
            self.exiting_since.set(None);
            return;
        }
        // SAFETY: nginx's own flag, written by this process's signal
        // handling between loop iterations; a plain read.
        if unsafe { nginx_sys::ngx_exiting } != 0 {
            let now = monotonic_ms();
            let since = self.exiting_since.get().unwrap_or(now);
            self.exiting_since.set(Some(since));
            if !exit_waits(now.saturating_sub(since), self.batch_reach()) {
                drop(batches);
                return self.give_up_batches();
            }
        }
        drop(batches);
        self.arm_batches();
    }

    /// Submits the batch of `refusal`, if one is due and none in flight.
    fn send_batch(&self, refusal: &[u8]) {
        self.send_batches(&[refusal.to_vec()]);
    }

    /// Submits the due batches of `refusals` in one call (one Redis; a
    /// Redis Cluster: the caller passes one, the keys of one client share
    /// a slot).
    fn send_batches(&self, refusals: &[Vec<u8>]) {
        let taken: Vec<_> = match self.batches.try_borrow_mut() {
            Ok(mut batches) => refusals
                .iter()
                .filter_map(|r| {
                    batches
                        .take(r, monotonic_ms())
                        .map(|(sending, ctx)| (r.clone(), sending, ctx))
                })
                .collect(),
            Err(_) => return,
        };
        let Some((_, _, first)) = taken.first() else {
            return;
        };
        let slot = first.tag.clone();
        let of: Vec<BatchOf> = taken
            .iter()
            .map(|(_, sending, ctx)| BatchOf {
                tag: ctx.tag.as_bytes(),
                limit: ctx.limit,
                rules: ctx.rules,
                sending: *sending,
            })
            .collect();
        let call = self.calls.batch(&of);
        let store = self.me.clone();
        type Keep = Box<dyn FnOnce(BreakerStatus)>;
        let sent: Vec<(Vec<u8>, Sending, Keep)> = taken
            .into_iter()
            .map(|(refusal, sending, ctx)| {
                let keep: Keep = Box::new(self.block_keeper(&ctx.key, ctx.rules));
                (refusal, sending, keep)
            })
            .collect();
        let failed: Vec<(Vec<u8>, Sending)> = sent
            .iter()
            .map(|(r, sending, _)| (r.clone(), *sending))
            .collect();
        let clients = sent.len();
        let on_reply = Box::new(move |frame: Option<OwnedFrame>| {
            let Some(store) = store.upgrade() else {
                return;
            };
            let replies = match &frame {
                Some(OwnedFrame::BulkString(text)) => replies::batch_text(text),
                _ => None,
            }
            .and_then(|r| replies::batches_from_reply(&r, clients).ok());
            let Some(replies) = replies else {
                // Applied or not, Redis applies each batch once: sent again.
                if let Ok(mut batches) = store.batches.try_borrow_mut() {
                    for (refusal, sending, _) in &sent {
                        batches.failed(refusal, *sending);
                    }
                }
                return store.arm_batches();
            };
            for ((refusal, sending, remember), (over, breaker)) in sent.into_iter().zip(replies) {
                let newly = match store.batches.try_borrow_mut() {
                    Ok(mut batches) => batches.acknowledged(&refusal, sending),
                    Err(_) => 0,
                };
                if let Some(cache) = &store.cache {
                    cache.refusals_sent(&refusal, newly, over, breaker.strikes);
                    // Blocked (maybe by another node): blocked here too
                    // from now on, and Redis decides once it ends.
                    if breaker.block != Block::Clear {
                        cache.forget_refusal(&refusal);
                    }
                }
                remember(breaker);
            }
        });
        if self.send(slot.as_bytes(), call, on_reply).is_err() {
            if let Ok(mut batches) = self.batches.try_borrow_mut() {
                for (refusal, sending) in &failed {
                    batches.failed(refusal, *sending);
                }
            }
            self.arm_batches();
        }
    }
}

/// nginx runs the batch timer.
unsafe extern "C" fn batch_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: `data` is the live store that armed this timer (it
        // cancels the timer before it goes away).
        let store = unsafe { &*(*ev).data.cast::<RedisStore>() };
        store.on_batch_timer();
    });
}

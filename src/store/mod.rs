//! The stores of a request (docs/operations.md, "How a request is
//! decided"): one round trip per shielded request decides the limit and
//! reads (and, for an offence, writes) the client's circuit breaker; one
//! more spends a solved challenge. What is asked and answered is the
//! core's vocabulary (`pow_shield_core::store`: `Op` → `Reply`).
//!
//! Two stores: [`ShmStore`] (local mode, the `local` fallback, and the
//! stand-in for a busy Redis; answers at once) and [`RedisStore`] (cluster
//! mode, answers later through a [`Waiter`] from nginx's event loop).
//! [`Stores`] chains them by `pow_shield_fail`, a late Redis failure
//! included, so the handler never learns which mode it runs in.

mod redis;
mod shm;

use core::cell::{Cell, RefCell};
use std::rc::Rc;

use nginx_sys::{ngx_cycle_t, ngx_event_t};
use ngx::core::Status;

pub use self::redis::RedisStore;
pub use self::shm::ShmStore;
use crate::config::MainConf;
pub use pow_shield_core::store::Spendable;
use pow_shield_core::store::{Now, Op, Reply, Subject};
use pow_shield_core::syntax::FailPolicy;

/// A store's answer, now or later.
pub enum Poll {
    Ready(Reply),
    /// The answer will be delivered to the waiter.
    Pending,
    /// Redis is down: the fallback, if any, decides.
    Down,
    /// Redis's queue is full (`MAX_IN_FLIGHT` commands wait):
    /// back-pressure, decided by the zone whatever `pow_shield_fail` says,
    /// never passed uncounted.
    Busy,
}

/// Where a store delivers a late answer: the request's resume event is
/// posted, and the request reads the answer when it runs again.
pub struct Waiter {
    answer: Cell<Option<Reply>>,
    /// The request's resume event; null once the request is gone.
    wake: Cell<*mut ngx_event_t>,
}

impl Waiter {
    pub fn new(wake: *mut ngx_event_t) -> Rc<Self> {
        Rc::new(Self {
            answer: Cell::new(None),
            wake: Cell::new(wake),
        })
    }

    /// Stores the answer and wakes the request, unless it has gone away.
    pub fn deliver(&self, answer: Reply) {
        let wake = self.wake.replace(core::ptr::null_mut());
        if wake.is_null() {
            return;
        }
        self.answer.set(Some(answer));
        // SAFETY: a non-null `wake` is the resume event of a live request
        // (the request's cleanup nulls it through `detach`); posting only
        // queues it for this loop iteration, never runs it from here.
        unsafe {
            nginx_sys::ngx_post_event(wake, core::ptr::addr_of_mut!(nginx_sys::ngx_posted_events))
        };
    }

    /// Whether the request still waits for the answer.
    pub fn is_waiting(&self) -> bool {
        !self.wake.get().is_null()
    }

    /// The delivered answer, if any.
    pub fn take(&self) -> Option<Reply> {
        self.answer.take()
    }

    /// The request is finished: never touch its event again.
    pub fn detach(&self) {
        self.wake.set(core::ptr::null_mut());
    }
}

/// Makes the waiter of a request, only for a store that will answer later
/// (local mode answers at once and allocates nothing).
pub type NewWaiter<'a> = dyn FnMut() -> Rc<Waiter> + 'a;

thread_local! {
    /// This worker's Redis store, when cluster mode is configured.
    static REDIS: RefCell<Option<Rc<RedisStore>>> = const { RefCell::new(None) };
}

/// The stores of one request: the primary (Redis in cluster mode, else the
/// zone) and, under `pow_shield_fail local`, the zone as its fallback. A
/// busy Redis hands its requests to the zone under every policy.
pub struct Stores {
    redis: Option<Rc<RedisStore>>,
    zone: Option<ShmStore>,
    /// `pow_shield_fail local` in cluster mode: the zone decides what Redis
    /// could not.
    fallback: bool,
}

impl Stores {
    /// The stores for a request under `fail`.
    pub fn new(mcf: &MainConf, fail: FailPolicy) -> Self {
        let redis = REDIS.try_with(|r| r.borrow().clone()).ok().flatten();
        Stores {
            fallback: redis.is_none() || fail == FailPolicy::Local,
            redis,
            zone: ShmStore::new(mcf),
        }
    }

    /// Asks `op`: at once from the zone, or later from Redis through the
    /// waiter (`None`). A Redis that fails it, now or later, hands it to
    /// the fallback; `Reply::Down` reaches the decision only without one.
    pub fn ask(&self, op: Op, subject: &Subject, waiter: &mut NewWaiter) -> Option<Reply> {
        let Some(redis) = &self.redis else {
            return Some(self.on_zone(op, subject));
        };
        let fallback = self.fallback.then(|| self.zone.clone()).flatten();
        match redis.ask(op, subject, fallback, waiter) {
            Poll::Ready(reply) => Some(reply),
            Poll::Pending => None,
            Poll::Down if self.fallback => Some(self.standing_in(op, subject)),
            Poll::Down => Some(Reply::Down),
            Poll::Busy => Some(self.standing_in(op, subject)),
        }
    }

    /// The zone decides what Redis could not.
    fn standing_in(&self, op: Op, subject: &Subject) -> Reply {
        match &self.zone {
            Some(zone) => zone.stand_in(op, subject, now()),
            None => Reply::Down,
        }
    }

    fn on_zone(&self, op: Op, subject: &Subject) -> Reply {
        match &self.zone {
            Some(zone) => zone.run(op, subject, now()),
            // No zone to decide with (nginx could not map it).
            None => Reply::Down,
        }
    }
}

/// Both clocks now.
pub fn now() -> Now {
    Now {
        monotonic_ms: crate::ffi::monotonic_ms(),
        epoch_ms: crate::ffi::now_ms(),
    }
}

/// Whether Redis is configured and currently failing (for metrics, logs
/// and `Retry-After` while refusing).
pub fn redis_retry_in_ms() -> Option<u64> {
    REDIS
        .try_with(|r| r.borrow().as_ref().and_then(|s| s.retry_in_ms()))
        .ok()
        .flatten()
}

/// The data generation a challenge issued now carries (cluster mode; none
/// in local mode).
pub fn challenge_generation() -> Option<u64> {
    REDIS
        .try_with(|r| r.borrow().as_ref().and_then(|s| s.challenge_generation()))
        .ok()
        .flatten()
}

/// Whether a solution of a challenge issued in `generation` may be spent
/// now (docs/operations.md, "Choosing a fail policy"); if not, the client
/// gets a fresh challenge. Always in local mode. `key`: the client's (a
/// Redis Cluster has a generation per slot).
pub fn accepts_generation(generation: Option<u64>, key: &[u8]) -> Spendable {
    REDIS
        .try_with(|r| {
            r.borrow()
                .as_ref()
                .map_or(Spendable::Now, |s| s.accepts(generation, key))
        })
        .unwrap_or(Spendable::Now)
}

/// The generation a solution of a challenge issued in `generation` is
/// spent in (none for one this node issued during an outage).
pub fn spend_generation(generation: Option<u64>) -> Option<u64> {
    REDIS
        .try_with(|r| match r.borrow().as_ref() {
            Some(s) => s.generations().spent_in(generation),
            None => generation,
        })
        .unwrap_or(generation)
}

/// A worker starts: opens its Redis connection in cluster mode.
pub fn init_worker(cycle: &mut ngx_cycle_t, mcf: &MainConf) -> Status {
    let Some(conf) = mcf.redis().filter(|_| mcf.shielded) else {
        return Status::NGX_OK;
    };
    match RedisStore::start(conf, ShmStore::new(mcf), cycle.log) {
        Some(store) => {
            let _ = REDIS.try_with(|r| *r.borrow_mut() = Some(store));
        }
        // Only the OS random source can fail here; a worker that exits would
        // be respawned into the same failure, so serve in local mode.
        None => error!(
            cycle.log,
            "pow_shield: cannot start the redis client; deciding locally"
        ),
    }
    Status::NGX_OK
}

/// `exit_process`: closes the Redis connection (nginx alerts on open sockets).
pub fn exit_worker(_cycle: &mut ngx_cycle_t) {
    if let Some(store) = REDIS.try_with(|r| r.borrow_mut().take()).ok().flatten() {
        store.shutdown();
    }
}

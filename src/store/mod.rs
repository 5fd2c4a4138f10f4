//! The store interface (DESIGN.md "Shape"): one round trip per shielded
//! request decides the limit, and one more spends a solved challenge.
//!
//! Two implementations: [`ShmStore`] (local mode and the `local` fallback,
//! answers at once) and [`RedisStore`] (cluster mode, answers later through a
//! [`Waiter`] from nginx's event loop).

mod redis;
mod shm;

use core::cell::{Cell, RefCell};
use std::rc::Rc;

use nginx_sys::{ngx_cycle_t, ngx_event_t};
use ngx::core::Status;
use ngx::http::HttpModuleMainConf;

pub use self::redis::RedisStore;
pub use self::shm::ShmStore;
use crate::config::MainConf;
use crate::limiter::{RateLimit, Verdict};
use crate::PowShield;

/// A store's answer, now or later.
pub enum Poll<T> {
    Ready(T),
    /// The answer will be delivered to the waiter.
    Pending,
    /// The store cannot answer: the request is decided by `pow_shield_fail`.
    Unavailable,
    /// The zone has no room to record this (every entry is an unexpired
    /// spent record): the request is refused with 503, never passed, or a
    /// solution could be replayed. Local store only.
    Full {
        retry_after_ms: u64,
    },
}

/// What a pending operation delivers to its waiter.
#[derive(Clone, Copy, Debug)]
pub enum Answer {
    Verdict(Verdict),
    /// `true`: the token was unspent and is now spent.
    Spent(bool),
    Unavailable,
}

/// Where a store delivers a late answer: the request's resume event is
/// posted, and the request reads the answer when it runs again.
pub struct Waiter {
    answer: Cell<Option<Answer>>,
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
    pub fn deliver(&self, answer: Answer) {
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

    /// The delivered answer, if any.
    pub fn take(&self) -> Option<Answer> {
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

/// A place that counts requests and remembers spent challenges.
pub trait Store {
    /// Counts one request of `key` against `limit` and says whether it fits.
    /// `now_ms` is nginx's monotonic clock (`ffi::monotonic_ms`), never the
    /// wall clock: a clock step must not freeze or refill local buckets.
    fn check(
        &self,
        key: &[u8],
        limit: RateLimit,
        now_ms: u64,
        waiter: &mut NewWaiter,
    ) -> Poll<Verdict>;

    /// Marks a solved challenge spent; `Ready(false)` if it already was.
    /// `expires_at_ms` and `now_ms` are epoch ms, the token's time scale.
    fn spend(
        &self,
        digest: &[u8; 32],
        expires_at_ms: u64,
        now_ms: u64,
        waiter: &mut NewWaiter,
    ) -> Poll<bool>;
}

thread_local! {
    /// This worker's Redis store, when cluster mode is configured.
    static REDIS: RefCell<Option<Rc<RedisStore>>> = const { RefCell::new(None) };
}

/// The store that decides requests in this worker.
pub enum Primary {
    Redis(Rc<RedisStore>),
    Local(ShmStore),
}

impl Store for Primary {
    fn check(
        &self,
        key: &[u8],
        limit: RateLimit,
        now_ms: u64,
        waiter: &mut NewWaiter,
    ) -> Poll<Verdict> {
        match self {
            Primary::Redis(s) => s.check(key, limit, now_ms, waiter),
            Primary::Local(s) => s.check(key, limit, now_ms, waiter),
        }
    }

    fn spend(
        &self,
        digest: &[u8; 32],
        expires_at_ms: u64,
        now_ms: u64,
        waiter: &mut NewWaiter,
    ) -> Poll<bool> {
        match self {
            Primary::Redis(s) => s.spend(digest, expires_at_ms, now_ms, waiter),
            Primary::Local(s) => s.spend(digest, expires_at_ms, now_ms, waiter),
        }
    }
}

/// Redis when configured (cluster mode), else the shared-memory zone.
pub fn primary(mcf: &MainConf) -> Option<Primary> {
    if let Some(redis) = REDIS.try_with(|r| r.borrow().clone()).ok().flatten() {
        return Some(Primary::Redis(redis));
    }
    local(mcf).map(Primary::Local)
}

/// The shared-memory store (local mode, and the `local` fallback).
pub fn local(mcf: &MainConf) -> Option<ShmStore> {
    ShmStore::new(mcf)
}

/// Whether this worker runs in cluster mode.
pub fn redis_configured() -> bool {
    REDIS.try_with(|r| r.borrow().is_some()).unwrap_or(false)
}

/// Whether Redis is configured and currently failing (for metrics, logs
/// and `Retry-After` while refusing).
pub fn redis_retry_in_ms() -> Option<u64> {
    REDIS
        .try_with(|r| r.borrow().as_ref().and_then(|s| s.retry_in_ms()))
        .ok()
        .flatten()
}

/// `init_process`: opens this worker's Redis connection. Cache manager and
/// loader processes run init_process too; they serve no requests.
pub fn init_worker(cycle: &mut ngx_cycle_t) -> Status {
    // SAFETY: set by nginx before init_process runs; read-only afterwards.
    let process = unsafe { nginx_sys::ngx_process } as u32;
    if process != nginx_sys::NGX_PROCESS_WORKER && process != nginx_sys::NGX_PROCESS_SINGLE {
        return Status::NGX_OK;
    }
    let Some(mcf) = PowShield::main_conf(cycle) else {
        return Status::NGX_OK;
    };
    let Some(conf) = mcf.redis().filter(|_| mcf.shielded) else {
        return Status::NGX_OK;
    };
    match RedisStore::start(conf, cycle.log) {
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

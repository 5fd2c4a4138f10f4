//! The store interface (docs/operations.md, "How a request is decided"): one round trip per shielded
//! request decides the limit and reads (and, for an offence, writes) the
//! client's circuit breaker; one more spends a solved challenge.
//!
//! Two implementations: [`ShmStore`] (local mode and the `local` fallback,
//! answers at once) and [`RedisStore`] (cluster mode, answers later through a
//! [`Waiter`] from nginx's event loop). [`Stores`] chains them by
//! `pow_shield_fail`, so the handler never asks which mode it runs in.

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
use crate::PowShield;
use pow_shield_core::decision::Checked;
use pow_shield_core::limiter::strikes::{RedRules, Standing};
use pow_shield_core::limiter::{RateLimit, Spent};
use pow_shield_core::values::FailPolicy;

/// A store's answer, now or later.
pub enum Poll<T> {
    Ready(T),
    /// The answer will be delivered to the waiter.
    Pending,
    /// The store is down (Redis): `pow_shield_fail` decides.
    Down,
    /// The store is up but its queue is full (Redis: `MAX_IN_FLIGHT`
    /// commands wait): back-pressure, decided by the zone whatever
    /// `pow_shield_fail` says, never passed uncounted.
    Busy,
    /// The zone has no room to record this, even after eviction (every
    /// entry is an unexpired spent record): refused with 503 and this
    /// `Retry-After`, never passed, or a solution could be replayed.
    Full {
        retry_after_ms: u64,
    },
}

/// What a pending operation delivers to its waiter.
#[derive(Clone, Copy, Debug)]
pub enum Answer {
    Checked(Checked),
    Spent(Spent),
    Struck(Standing),
    /// The store failed the operation: the fallback decides.
    Down,
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

/// What a check asks: count one request of `key` against `limit` and apply
/// the red-zone `rules`; a refusal is a strike when `offence`.
#[derive(Clone, Copy)]
pub struct CheckArgs<'a> {
    pub key: &'a [u8],
    pub limit: RateLimit,
    /// Count with the approximate sliding-window counter (cluster mode;
    /// local mode's bucket is O(1) memory already).
    pub approx: bool,
    pub rules: RedRules,
    pub offence: bool,
}

/// What a spend asks: record `digest` spent until `expires_at_ms` (epoch
/// ms) and take back one strike of `key`, unless `key` is blocked.
#[derive(Clone, Copy)]
pub struct SpendArgs<'a> {
    pub key: &'a [u8],
    pub rules: RedRules,
    pub digest: &'a [u8; 32],
    pub expires_at_ms: u64,
}

/// A place that counts requests, remembers spent challenges and keeps the
/// circuit breaker. `check` and `strike` take nginx's monotonic clock
/// (`ffi::monotonic_ms`: a wall-clock step must not freeze or refill local
/// buckets); `spend` takes epoch ms, the token's time scale. Redis uses its
/// own clock.
pub trait Store {
    /// The limiter's verdict and the client's standing, in one operation.
    /// A blocked client writes nothing.
    fn check(&self, args: CheckArgs, now_ms: u64, waiter: &mut NewWaiter) -> Poll<Checked>;

    /// Marks a solved challenge spent and takes back the strike its 429
    /// recorded, atomically; a blocked client changes nothing. `now_ms` is
    /// epoch ms (the token's scale), `monotonic_ms` the breaker's clock.
    fn spend(
        &self,
        args: SpendArgs,
        now_ms: u64,
        monotonic_ms: u64,
        waiter: &mut NewWaiter,
    ) -> Poll<Spent>;

    /// One strike for `key` unless it is blocked; the standing after it.
    fn strike(
        &self,
        key: &[u8],
        rules: RedRules,
        now_ms: u64,
        waiter: &mut NewWaiter,
    ) -> Poll<Standing>;
}

thread_local! {
    /// This worker's Redis store, when cluster mode is configured.
    static REDIS: RefCell<Option<Rc<RedisStore>>> = const { RefCell::new(None) };
}

/// The store that decides requests in this worker.
enum Primary {
    Redis(Rc<RedisStore>),
    Local(ShmStore),
}

/// The stores of one request: the primary (Redis in cluster mode, else the
/// zone) and, under `pow_shield_fail local`, the zone as its fallback. A
/// busy Redis hands its requests to the zone under every policy.
pub struct Stores {
    primary: Primary,
    fallback: Option<ShmStore>,
    zone: Option<ShmStore>,
}

/// One operation on a store, run on the primary and maybe the fallback.
pub trait Op<T>: Fn(&dyn Store, &mut NewWaiter) -> Poll<T> {}
impl<T, F: Fn(&dyn Store, &mut NewWaiter) -> Poll<T>> Op<T> for F {}

impl Stores {
    /// The stores for a request under `fail`; `None` without a zone.
    pub fn new(mcf: &MainConf, fail: FailPolicy) -> Option<Self> {
        let redis = REDIS.try_with(|r| r.borrow().clone()).ok().flatten();
        Some(match redis {
            Some(redis) => Stores {
                primary: Primary::Redis(redis),
                fallback: match fail {
                    FailPolicy::Local => ShmStore::new(mcf),
                    FailPolicy::Open | FailPolicy::Closed => None,
                },
                zone: ShmStore::new(mcf),
            },
            None => Stores {
                primary: Primary::Local(ShmStore::new(mcf)?),
                fallback: None,
                zone: None,
            },
        })
    }

    /// Runs `op` on the primary store, and on the fallback if the primary
    /// is down.
    pub fn run<T>(&self, op: impl Op<T>, waiter: &mut NewWaiter) -> Poll<T> {
        let primary: &dyn Store = match &self.primary {
            Primary::Redis(s) => s,
            Primary::Local(s) => s,
        };
        match op(primary, waiter) {
            Poll::Down => self.fallback(op),
            Poll::Busy => match &self.zone {
                Some(zone) => op(zone, &mut || Waiter::new(core::ptr::null_mut())),
                None => Poll::Down,
            },
            poll => poll,
        }
    }

    /// Runs `op` on the fallback, after the primary failed it late.
    pub fn fallback<T>(&self, op: impl Op<T>) -> Poll<T> {
        match &self.fallback {
            // The zone answers at once and never asks for a waiter.
            Some(zone) => op(zone, &mut || Waiter::new(core::ptr::null_mut())),
            None => Poll::Down,
        }
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
    crate::http::status::init_worker(mcf);
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

//! The stores of a request (docs/operations.md, "How a request is
//! decided"): one round trip per shielded request decides the limit and
//! reads (and, for an offence, writes) the client's circuit breaker; one
//! more spends a solved challenge. What is asked and answered is the
//! core's vocabulary (`pow_shield_core::store`: `Op` → `Reply`).
//!
//! Two stores: [`ZoneStore`] (local mode, the `local` fallback, and the
//! stand-in for a busy Redis; answers at once) and [`RedisStore`] (cluster
//! mode, answers later through a [`Waiter`] from nginx's event loop).
//! [`Stores`] asks Redis, and what Redis does not answer, now or later,
//! is decided by one rule (`pow_shield_core::cluster::fallback`), asked in
//! one place ([`Late::decide`]).

pub mod admin;
mod nonces;
mod redis;
mod zone;

use core::cell::{Cell, RefCell};
use core::ptr::NonNull;
use std::rc::Rc;

use nginx_sys::{ngx_cycle_t, ngx_event_t};
use ngx::core::Status;

pub use self::nonces::record_bot_nonce;
use self::redis::NodeCache;
pub use self::redis::RedisStore;
pub use self::zone::{straight_admit, StraightKey, ZoneStore};
use crate::config::MainConf;
pub use pow_shield_core::cluster::fallback::Unavailable;
use pow_shield_core::cluster::fallback::{self, Decider, Unanswered};
use pow_shield_core::limiter::breaker::BreakerRules;
use pow_shield_core::limiter::{Limits, MAX_LIMITS};
pub use pow_shield_core::store::Spendable;
use pow_shield_core::store::{Checked, Now, Offence, Op, Reply, Solution, Spent, Subject};
use pow_shield_core::syntax::FailPolicy;

/// A store's answer, now or later. (`Failed` carries what the request
/// asked unboxed, as the waiter keeps it: a box was one allocation more
/// for every request sent to Redis; a `Poll` is returned once a request
/// and never stored, `Ready` and `Pending` write no more than before.)
#[allow(clippy::large_enum_variant)]
pub enum Poll {
    Ready(Reply),
    /// The answer will be delivered to the waiter.
    Pending,
    /// Redis did not take it: the fallback rule decides (`Late::decide`).
    Failed(Unavailable, Late),
}

/// Where a store delivers a late answer: the request's resume event is
/// posted, and the request reads the answer when it runs again. `A`: a
/// store's `Reply` (the access handler), or the admin location's answer.
pub struct Waiter<A = Reply> {
    answer: Cell<Option<A>>,
    /// The request's resume event; null once the request is gone.
    wake: Cell<*mut ngx_event_t>,
    /// What it asked, for the fallback rule if Redis fails it: kept in
    /// the waiter's own allocation, not a box of its own (one allocation a
    /// request fewer), and written over in place by the next request that
    /// waits in this waiter (`keep`).
    late: RefCell<Option<Late>>,
    /// `late` is this request's (kept, not taken nor answered yet).
    late_kept: Cell<bool>,
}

impl<A> Waiter<A> {
    pub fn new(wake: *mut ngx_event_t) -> Rc<Self> {
        Rc::new(Self {
            answer: Cell::new(None),
            wake: Cell::new(wake),
            late: RefCell::new(None),
            late_kept: Cell::new(false),
        })
    }
}

thread_local! {
    /// A request's waiter done with, kept for the next request to wait
    /// (one allocation and free fewer a request sent to Redis; one is
    /// enough: requests take their answers one at a time).
    static SPARE: Cell<Option<Rc<Waiter>>> = const { Cell::new(None) };
}

impl Waiter {
    /// [`Waiter::new`], in this worker's spare waiter when there is one.
    pub fn reused(wake: *mut ngx_event_t) -> Rc<Self> {
        let spare = SPARE.with(|spare| spare.take());
        match spare {
            Some(mut spare) => match Rc::get_mut(&mut spare) {
                // (What the last request asked stays, to be written over;
                // every field named, so one added is not forgotten here.)
                Some(Waiter {
                    answer,
                    wake: wakes,
                    late: _,
                    late_kept,
                }) => {
                    *answer.get_mut() = None;
                    *wakes.get_mut() = wake;
                    *late_kept.get_mut() = false;
                    spare
                }
                None => Waiter::new(wake),
            },
            None => Waiter::new(wake),
        }
    }

    /// A request is done with `waiter`: kept as the spare if nothing else
    /// holds it (Redis's side let go once it delivered), else let go.
    pub fn recycle(waiter: Rc<Self>) {
        if Rc::strong_count(&waiter) == 1 && Rc::weak_count(&waiter) == 0 {
            SPARE.with(|spare| spare.set(Some(waiter)));
        }
    }

    /// Keeps what the request asked until it has its answer: the
    /// fallback rule decides it if Redis does not answer (`fall_back`).
    /// Written over what an earlier request kept here, in place.
    pub fn keep(&self, asked: &Asked) {
        let Ok(mut kept) = self.late.try_borrow_mut() else {
            return;
        };
        match kept.as_mut() {
            Some(late) => late.write(asked),
            None => *kept = Some(Late::of(asked)),
        }
        self.late_kept.set(true);
    }

    /// What the request asked, back (the call was not sent): taken within
    /// the ask, or while the request waits ([`Lent`]).
    pub fn take_late(&self) -> Option<Late> {
        if !self.late_kept.replace(false) {
            return None;
        }
        self.late.try_borrow_mut().ok()?.take()
    }

    /// Redis did not answer (`sent`: after the call reached it): the
    /// fallback rule decides for a request still waiting (one gone
    /// meanwhile is neither counted, struck nor spent). What it returns
    /// the zone spent, to write to Redis later.
    pub fn fall_back(&self, failure: Unavailable, sent: bool) -> Option<Replay> {
        if !self.is_waiting() {
            self.disown_late();
            return None;
        }
        let Some(late) = self.take_late() else {
            // (Every request that waits keeps its own; never left hanging.)
            self.deliver(Reply::Down);
            return None;
        };
        // SAFETY: the request still waits (checked above, nothing between
        // runs nginx's loop): its pool and configuration are live.
        let decided = unsafe { late.decide(failure, sent) };
        self.deliver(decided.reply);
        decided.replay
    }
}

impl<A> Waiter<A> {
    /// Stores the answer and wakes the request, unless it has gone away.
    pub fn deliver(&self, answer: A) {
        self.disown_late();
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

    /// What the request asked, no longer needed: disowned but left where it
    /// is kept, for the next request to write over (`keep`).
    fn disown_late(&self) {
        self.late_kept.set(false);
    }

    /// Whether the request still waits for the answer.
    pub fn is_waiting(&self) -> bool {
        !self.wake.get().is_null()
    }

    /// The delivered answer, if any.
    pub fn take(&self) -> Option<A> {
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

/// What a request asks Redis, as the fallback rule needs it: made into a
/// [`Late`] only once it goes to Redis (an answer at once copies nothing).
pub struct Asked<'a> {
    pub op: Op,
    pub subject: &'a Subject<'a>,
    zone: &'a Option<ZoneStore>,
    fail_local: bool,
    redis_only: bool,
}

thread_local! {
    /// This worker's Redis store, when cluster mode is configured.
    static REDIS: RefCell<Option<Rc<RedisStore>>> = const { RefCell::new(None) };
}

/// The stores of one request: Redis in cluster mode, and the zone (the
/// store of local mode; in cluster mode the stand-in the fallback rule
/// chooses: `pow_shield_core::cluster::fallback`).
pub struct Stores {
    redis: Option<Rc<RedisStore>>,
    zone: Option<ZoneStore>,
    /// `pow_shield_fail`.
    fail: FailPolicy,
}

impl Stores {
    /// The stores for a request under `fail`.
    pub fn new(mcf: &MainConf, fail: FailPolicy) -> Self {
        Stores {
            // (Local mode: no thread-local to look up.)
            redis: mcf.redis().and_then(|_| redis_store()),
            zone: ZoneStore::new(mcf),
            fail,
        }
    }

    /// Asks `op`: at once from the zone, or later from Redis through the
    /// waiter (`None`). What Redis does not take, now or later, the
    /// fallback rule decides (`Late::decide`); `Reply::Down` reaches the
    /// decision only when it leaves it to `pow_shield_fail`.
    /// (Inline, the zone's answer too: local mode's answer is made where
    /// the handler reads it, not copied out through the layers; Redis's
    /// path is [`Stores::ask_redis`].)
    /// `subject` must borrow what lives while the request waits (its pool,
    /// its location's configuration): a late fallback reads it ([`Lent`]).
    #[inline(always)]
    pub fn ask(&self, op: Op, subject: &Subject, waiter: &mut NewWaiter) -> Option<Reply> {
        match &self.redis {
            Some(redis) => self.ask_redis(redis, op, subject, waiter),
            None => Some(match &self.zone {
                Some(zone) => zone.run(op, subject, now()),
                // No zone to decide with (nginx could not map it).
                None => Reply::Down,
            }),
        }
    }

    /// [`Stores::ask`] in cluster mode.
    #[inline(never)]
    fn ask_redis(
        &self,
        redis: &Rc<RedisStore>,
        op: Op,
        subject: &Subject,
        waiter: &mut NewWaiter,
    ) -> Option<Reply> {
        // Just back from an outage: an unpaid refusal is no strike until the
        // other nodes had time to return and write the payments they took
        // meanwhile (`health::RECOVERY_GRACE_MS`).
        let unpaid = Op::Check {
            offence: Offence::Unpaid,
        };
        let op = match op == unpaid && !redis.strikes_unpaid(subject.key) {
            true => op.standing_in(),
            false => op,
        };
        // A solution only Redis may spend (the node says: of Redis's
        // generation, or not spendable now): the zone never admits with it.
        let redis_only = match op {
            Op::Spend(solution) => redis.redis_only(&solution, subject.key),
            _ => false,
        };
        let asked = Asked {
            op,
            subject,
            zone: &self.zone,
            fail_local: self.fail == FailPolicy::Local,
            redis_only,
        };
        match redis.ask(&asked, self.fail, waiter) {
            Poll::Ready(reply) => Some(reply),
            Poll::Pending => None,
            Poll::Failed(failure, late) => {
                // SAFETY: within the ask that made it: `subject` is borrowed.
                let decided = unsafe { late.decide(failure, false) };
                if let Some(replay) = decided.replay {
                    redis.replay_later(&replay);
                }
                Some(decided.reply)
            }
        }
    }
}

impl Stores {
    /// Whether this node knows `key`'s breaker to be open without asking a
    /// store: the zone's in local mode; in cluster mode the blocks Redis
    /// reported, which the zone keeps (never one the fallback counted on
    /// its own). For deciding what to skip before the one round trip.
    pub fn known_block(&self, key: &[u8], rules: BreakerRules) -> bool {
        match (&self.redis, &self.zone) {
            (Some(redis), _) => redis.known_block(key, rules).is_some(),
            (None, Some(zone)) => zone.blocked(key, rules, now().monotonic_ms),
            (None, None) => false,
        }
    }
}

/// What the request path asks of the data generations and Redis's health
/// (docs/operations.md, "Choosing a fail policy"); in local mode there are
/// neither.
impl Stores {
    /// While Redis is failing: milliseconds until it is tried again (the
    /// `Retry-After` of a 503).
    pub fn retry_in_ms(&self) -> Option<u64> {
        self.redis.as_ref()?.retry_in_ms()
    }

    /// The data generation a challenge issued now for client `key`
    /// carries; `answered`: the one its check answered (passed on by the
    /// decision, `Final::generation`), the client's slot's in a Redis
    /// Cluster. Local mode: `answered` (none).
    pub fn challenge_generation(&self, key: &[u8], answered: Option<u64>) -> Option<u64> {
        match &self.redis {
            Some(redis) => redis.challenge_generation(key, answered),
            None => answered,
        }
    }

    /// Whether a solution of a challenge issued in `generation` may be
    /// spent now (if not, the store answers its spend with a fresh
    /// challenge), or never (`Stale`: no payment). `key`: the client's (a
    /// Redis Cluster has a generation per slot).
    pub fn accepts(&self, generation: Option<u64>, key: &[u8]) -> Spendable {
        self.redis
            .as_ref()
            .map_or(Spendable::Now, |redis| redis.accepts(generation, key))
    }
}

/// What a request asked of Redis, kept so that the fallback rule can
/// decide it if Redis does not answer, now or later: decided only while
/// the request waits for it ([`Lent`]), its keys and limits are read
/// where the request keeps them, not copied.
pub struct Late {
    op: Op,
    lent: Lent,
    rules: BreakerRules,
    rising: bool,
    zone: Option<ZoneStore>,
    fail_local: bool,
    redis_only: bool,
}

/// The subject of a request a [`Late`] keeps: its client key and `key=`
/// values (request pool bytes, or static ones) and its location's limits
/// (configuration), by address. A `Late` is decided either within the ask
/// that made it (its caller borrows the subject), or by
/// [`Waiter::fall_back`] only while the request still waits
/// ([`Waiter::is_waiting`]): a waiting request is live, as the waiter's
/// `wake` event is (its state detaches the waiter before its pool goes),
/// and with it its pool and its location's configuration.
#[derive(Clone, Copy)]
struct Lent {
    key: (*const u8, usize),
    limits: NonNull<Limits>,
    /// The first [`Lent::values`] are the request's (the others, an
    /// earlier request's or none, are never read).
    key_values: [Option<(*const u8, usize)>; MAX_LIMITS],
    values: usize,
}

impl Lent {
    fn of(subject: &Subject) -> Self {
        let mut lent = Lent {
            key: (core::ptr::null(), 0),
            limits: NonNull::from(subject.limits),
            key_values: [None; MAX_LIMITS],
            values: 0,
        };
        lent.write(subject);
        lent
    }

    /// [`Lent::of`] `subject`, written over this one in place: only the
    /// subject's own values (most locations have one limit or two, of
    /// room for eight).
    fn write(&mut self, subject: &Subject) {
        self.key = (subject.key.as_ptr(), subject.key.len());
        self.limits = NonNull::from(subject.limits);
        self.values = subject.key_values.len().min(MAX_LIMITS);
        for (kept, value) in self.key_values.iter_mut().zip(subject.key_values) {
            *kept = value.map(|v| (v.as_ptr(), v.len()));
        }
    }

    /// The subject's key, limits and values again.
    ///
    /// # Safety
    /// The request whose subject it is is live (see [`Lent`]).
    unsafe fn get<'a>(&self) -> (&'a [u8], &'a Limits, [Option<&'a [u8]>; MAX_LIMITS]) {
        // SAFETY: per the contract, each address is what the subject
        // borrowed, and still live; an empty slice's address is never read.
        let bytes = |(data, len): (*const u8, usize)| match len {
            0 => &[][..],
            len => unsafe { core::slice::from_raw_parts(data, len) },
        };
        // SAFETY: as above.
        let limits = unsafe { self.limits.as_ref() };
        let mut values = [None; MAX_LIMITS];
        for (value, kept) in values
            .iter_mut()
            .zip(self.key_values.iter().take(self.values))
        {
            *value = kept.map(bytes);
        }
        (bytes(self.key), limits, values)
    }
}

/// A spend the zone made for Redis, to write there once it answers.
pub struct Replay {
    pub key: Vec<u8>,
    pub solution: Solution,
}

/// What the fallback rule decided for a request Redis did not answer.
struct Decided {
    reply: Reply,
    replay: Option<Replay>,
}

impl Late {
    /// What `asked` leaves to the fallback rule.
    fn of(asked: &Asked) -> Late {
        Late {
            op: asked.op,
            lent: Lent::of(asked.subject),
            rules: asked.subject.rules,
            rising: asked.subject.rising,
            zone: asked.zone.clone(),
            fail_local: asked.fail_local,
            redis_only: asked.redis_only,
        }
    }

    /// [`Late::of`] `asked`, written over this one in place. (Every field
    /// named, as `of` names them: a field added and not written here fails
    /// to compile, rather than keep the last request's value.)
    fn write(&mut self, asked: &Asked) {
        let Late {
            op,
            lent,
            rules,
            rising,
            zone,
            fail_local,
            redis_only,
        } = self;
        *op = asked.op;
        lent.write(asked.subject);
        *rules = asked.subject.rules;
        *rising = asked.subject.rising;
        zone.clone_from(asked.zone);
        *fail_local = asked.fail_local;
        *redis_only = asked.redis_only;
    }

    /// The one place the fallback rule is asked (`fallback::decider`),
    /// and what it says carried out.
    ///
    /// # Safety
    /// Within the ask that made it, or while its request waits ([`Lent`]).
    unsafe fn decide(self, failure: Unavailable, sent: bool) -> Decided {
        let decider = fallback::decider(Unanswered {
            op: self.op,
            failure,
            sent,
            fail_local: self.fail_local,
            zone: self.zone.is_some(),
            redis_only: self.redis_only,
            owed: matches!(self.op, Op::Spend(s) if s.owed(self.rules)),
        });
        let (maybe_struck, replay, record) = match (decider, &self.zone) {
            (
                Decider::Zone {
                    maybe_struck,
                    replay,
                },
                Some(_),
            ) => (maybe_struck, replay, false),
            (Decider::Record, Some(_)) => (false, true, true),
            (Decider::NotNow { pays_back }, _) => {
                return Decided::now(Reply::Spent(Spent::NotRecorded { pays_back }))
            }
            _ => return Decided::now(Reply::Down),
        };
        // SAFETY: per the contract (`Lent`).
        let (key, limits, values) = unsafe { self.lent.get() };
        let subject = Subject {
            key,
            limits,
            key_values: &values[..self.lent.values],
            rules: self.rules,
            rising: self.rising,
        };
        let reply = match self
            .zone
            .as_ref()
            .map(|zone| zone.stand_in(self.op, &subject, now()))
        {
            Some(Reply::Checked(checked)) if maybe_struck => Reply::Checked(Checked {
                maybe_struck: !checked.verdict.allowed,
                ..checked
            }),
            Some(reply) if record => fallback::recorded(reply),
            Some(reply) => reply,
            None => Reply::Down,
        };
        let replay = match self.op {
            Op::Spend(solution) if replay => Some(Replay {
                key: key.to_vec(),
                solution,
            }),
            _ => None,
        };
        Decided { reply, replay }
    }
}

impl Decided {
    fn now(reply: Reply) -> Self {
        Decided {
            reply,
            replay: None,
        }
    }
}

/// This worker's Redis store, in cluster mode.
pub fn redis_store() -> Option<Rc<RedisStore>> {
    REDIS.try_with(|r| r.borrow().clone()).ok().flatten()
}

/// Both clocks now.
pub fn now() -> Now {
    Now {
        monotonic_ms: crate::ffi::monotonic_ms(),
        epoch_ms: crate::ffi::now_ms(),
    }
}

/// A worker starts: opens its Redis connection in cluster mode.
pub fn init_worker(cycle: &mut ngx_cycle_t, mcf: &MainConf) -> Status {
    let Some(conf) = mcf.redis().filter(|_| mcf.shielded) else {
        return Status::NGX_OK;
    };
    // Redis's health is the node's: every worker shares it in the zone.
    if let Some(zone) = crate::shm::SharedZone::from_conf(mcf) {
        crate::shm::health::attach(zone.redis_health());
    }
    match RedisStore::start(conf, NodeCache::new(mcf), cycle.log) {
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

//! Per-request state, kept once per main request.
//!
//! Internal redirects (`index`, `try_files`, `error_page`) wipe `r->ctx` and
//! re-run the access phase; the state is therefore found through its own
//! entry in the request pool's cleanup list (as `ngx_http_realip_module`
//! does), so that a request is counted once.

use core::ffi::c_void;
use core::mem::{align_of, size_of, MaybeUninit};
use core::ptr::{self, NonNull};
use std::rc::Rc;

use nginx_sys::{ngx_event_t, ngx_http_request_t, ngx_pool_cleanup_t, ngx_variable_value_t};
use ngx::http::{HttpModule, Request};

use super::key::{default_key_of, Pooled};
use crate::config::Policy;
use crate::ffi::PowShield;
use crate::store::Waiter;
use pow_shield_core::admin::FromRedis;
use pow_shield_core::decision::redirect::Earlier;
pub use pow_shield_core::decision::redirect::Resolution;
use pow_shield_core::decision::straight::Straight;
use pow_shield_core::decision::{Decision, Final, Outcome};
use pow_shield_core::headers::HeaderValues;
use pow_shield_core::limiter::breaker::BreakerStatus;
use pow_shield_core::limiter::{Verdict, MAX_LIMITS};
use pow_shield_core::store::Reply;

/// Where the request is with its Web Bot Auth signature (`http::bot`).
#[derive(Clone, Copy)]
pub enum SignatureCheck {
    /// Verified when `$pow_shield_bot` is first read.
    Verify,
    /// The client key is being evaluated as if the request were unsigned:
    /// the variable reads empty, uncached; `saved` is a copy of the
    /// request's variables as they were when it was first read (null until
    /// then, and while no signed request read it).
    Anonymous { saved: *mut ngx_variable_value_t },
    /// Never verified: the anonymous client is blocked.
    Skipped,
}

/// A request's `key=` values by limit (the first `Limits::len` count), as
/// the state keeps them: request pool bytes (pointer, length).
pub type Evaluated = [Option<(*const u8, usize)>; MAX_LIMITS];

/// A state and its pool cleanup entry, allocated together.
#[repr(C)]
struct Attached {
    cleanup: ngx_pool_cleanup_t,
    state: RequestState,
}

/// A request the straight path admitted (`http::straight`), with its pool
/// cleanup entry, allocated together: no state is made for it, but what
/// the full path would have left in one is here, and the state is made
/// of it as soon as anything asks for one ([`RequestState::find`]).
#[repr(C)]
pub struct Passed {
    cleanup: ngx_pool_cleanup_t,
    policy: NonNull<Policy>,
    /// The client key the request was counted under.
    key: PassedKey,
    verdict: Verdict,
    /// When it was decided (epoch ms).
    at_ms: u64,
    /// The header filter saw the response (`RequestState::headers_sent`).
    pub headers_sent: bool,
    /// Room for its rate-limit headers' values was taken after it
    /// ([`PassedRoom`]): what [`Passed::header_values`] asks, not
    /// the policy, so that the values are never written past a mark made
    /// without their room.
    values: bool,
}

/// Room for a [`Passed`] mark ([`Passed::room`]), and whether room for its
/// rate-limit headers' values follows it.
pub struct PassedRoom {
    at: NonNull<Passed>,
    values: bool,
}

/// The mark of a request of a location that sends rate-limit headers:
/// room for their values after it (`RequestState::header_values`),
/// written by the header filter. (A location without the headers has no
/// room taken for them: [`Passed::room`].)
#[repr(C)]
struct PassedWithValues {
    passed: Passed,
    header_values: MaybeUninit<HeaderValues>,
}

/// The client key a [`Passed`] request was counted under.
#[derive(Clone, Copy)]
pub enum PassedKey {
    /// Made in the request pool.
    Made(Pooled),
    /// The default key read in parts: the IPv4 peer's address text as it
    /// was counted (`c->addr_text`'s bytes then), from which the key is
    /// made if the state is. Not the address text the connection holds
    /// later: realip in a redirect's target rewrites it.
    Address(Pooled),
}

impl Passed {
    /// Room for the mark of a request the straight path may admit, taken
    /// before anything is counted (a request whose mark could not be made
    /// is counted nowhere), with room for its rate-limit headers' values
    /// when `headers` ([`Passed::header_values`]). Filled by
    /// [`Passed::attach`], or left unused in the pool.
    #[inline(always)]
    pub fn room(r: &Request, headers: bool) -> Option<PassedRoom> {
        let raw: &ngx_http_request_t = r.as_ref();
        let size = match headers {
            true => size_of::<PassedWithValues>(),
            false => size_of::<Passed>(),
        };
        // SAFETY: an allocation of the live request's pool; nothing reads
        // it before `attach` writes it in full. (`PassedWithValues` starts
        // with a `Passed` and is aligned as one.)
        let passed = unsafe { nginx_sys::ngx_palloc(raw.pool, size) };
        let passed = NonNull::new(passed.cast::<Passed>())?;
        (passed.as_ptr() as usize)
            .is_multiple_of(align_of::<Passed>())
            .then_some(PassedRoom {
                at: passed,
                values: headers,
            })
    }

    /// The room for the rate-limit headers' values after `passed`, if its
    /// room was taken with theirs ([`Passed::room`]).
    ///
    /// # Safety
    /// `passed` is a live mark ([`Passed::attach`]) and nothing else
    /// borrows the room after it.
    pub unsafe fn header_values<'a>(
        passed: NonNull<Passed>,
    ) -> Option<&'a mut MaybeUninit<HeaderValues>> {
        // SAFETY: a live mark, per the contract; when its room was taken
        // with the values, it is the first field of a `PassedWithValues`
        // (`repr(C)`) of the same allocation.
        unsafe {
            match (*passed.as_ptr()).values {
                true => Some(&mut (*passed.as_ptr().cast::<PassedWithValues>()).header_values),
                false => None,
            }
        }
    }

    /// Marks `r` admitted by the straight path under `policy`, its client
    /// `key` counted with `verdict` at `at_ms`, in `room` (from
    /// [`Passed::room`] for `r`): the request's module context and its
    /// pool cleanup entry, as [`RequestState::attach`] makes them, so that
    /// an internal redirect finds that the request was decided. (Inline:
    /// every request of the straight path.)
    #[inline(always)]
    pub fn attach(
        r: &mut Request,
        room: PassedRoom,
        policy: &Policy,
        key: PassedKey,
        verdict: Verdict,
        at_ms: u64,
    ) {
        let raw: *mut ngx_http_request_t = (&mut *r).into();
        let passed = room.at.as_ptr();
        // SAFETY: `room` is an aligned allocation of the live request's
        // pool, written in full before it is linked into the pool's cleanup
        // list; it has no handler (it holds plain values only: nothing to
        // drop), so the pool's walk at the request's end skips it, and its
        // `data`, the address of [`PASSED`], says it is a mark.
        unsafe {
            let pool = (*raw).pool;
            ptr::write(
                passed,
                Passed {
                    cleanup: ngx_pool_cleanup_t {
                        handler: None,
                        data: passed_tag(),
                        next: (*pool).cleanup,
                    },
                    policy: NonNull::from(policy),
                    key,
                    verdict,
                    at_ms,
                    headers_sent: false,
                    values: room.values,
                },
            );
            (*pool).cleanup = ptr::addr_of_mut!((*passed).cleanup);
        }
        r.set_module_ctx(passed.cast(), PowShield::module());
    }
}

impl Passed {
    /// The policy the request was admitted under, its verdict, and when
    /// (epoch ms): what its rate-limit headers say.
    #[inline(always)]
    pub fn decided<'c>(&self) -> (&'c Policy, &Verdict, u64) {
        // SAFETY: the location configuration outlives every request of its
        // cycle, and nothing writes it after configuration.
        let policy = unsafe { self.policy.as_ref() };
        (policy, &self.verdict, self.at_ms)
    }
}

/// What a request has of the shield, found without making anything.
pub enum Found {
    State(NonNull<RequestState>),
    /// Admitted by the straight path (no state made yet).
    Passed(NonNull<Passed>),
}

/// The shield's state for one main request.
pub struct RequestState {
    pub resolution: Resolution,
    /// The policy of the location that decided (headers use it too), in
    /// its location configuration: not copied per request.
    policy: NonNull<Policy>,
    /// The client key once evaluated (request pool memory).
    pub key: Option<(*const u8, usize)>,
    /// Each limit's `key=` value once evaluated (request pool memory;
    /// `None` inside: the limit counts per client key), by the limit's
    /// place; `None`: not evaluated, or no limit has a `key=`.
    pub key_values: Option<Evaluated>,
    /// The decision in progress (kept across store round trips).
    pub decision: Option<Decision>,
    /// The green path's check was asked and its answer awaited: the
    /// decision to resume is [`Decision::after_first`] of the policy's
    /// rules, made again when the answer arrives rather than kept here (a
    /// decision is 300 bytes, moved in and out of the state).
    pub after_first: bool,
    /// The decision made, and when (epoch ms, for `X-RateLimit-Reset`).
    pub decided: Option<(Final, u64)>,
    /// The rate-limit headers were added to the response.
    pub headers_sent: bool,
    /// Their values, once made: the response's headers point into them
    /// (the state lives as long as the request's pool), not into a copy.
    /// Written once; never written over or reset while they point here
    /// (made again only once nginx cleared the list: `filter::cleared`).
    pub header_values: Option<HeaderValues>,
    /// The pending store operation, if any.
    pub waiter: Option<Rc<Waiter>>,
    /// The admin location's pending Redis answer (`http::admin`): it
    /// waits as the access handler does, woken by the same event.
    pub admin: Option<Rc<Waiter<FromRedis>>>,
    /// The bits the request's verified solution proved (the price paid).
    pub paid_bits: Option<u8>,
    /// What becomes of the request's Web Bot Auth signature.
    pub signature: SignatureCheck,
    /// What the decisions made before this one did, after an internal
    /// redirect into another policy (`decision::redirect`); `None` for the
    /// request's first.
    pub earlier: Option<Box<Earlier>>,
    /// One of them admitted it by payment.
    pub paid_before: bool,
    /// Posted by the store when a pending answer arrives.
    resume: ngx_event_t,
}

impl RequestState {
    /// This request's state, if it has one; a request the straight path
    /// admitted has its state made now, as the full path would have left
    /// it. A pointer, not a reference: the handler and the header filter
    /// reach the same state, and each takes only short borrows of it.
    pub fn find(r: &mut Request) -> Option<NonNull<RequestState>> {
        match Self::found(r)? {
            Found::State(state) => Some(state),
            Found::Passed(passed) => Self::made_of(r, passed),
        }
    }

    /// What the request has of the shield, if anything, made into nothing.
    /// The module context and our pool cleanup entries both start with the
    /// entry (`Attached`, [`Passed`]); [`RequestState::entry`] says which
    /// it is.
    pub fn found(r: &Request) -> Option<Found> {
        let module = PowShield::module();
        let raw: &ngx_http_request_t = r.as_ref();
        // SAFETY: r->ctx has a slot per module; ours is null or one of our
        // pool cleanup entries in this request's pool.
        let cached = unsafe { *raw.ctx.add(module.ctx_index) }.cast::<ngx_pool_cleanup_t>();
        if let Some(cached) = NonNull::new(cached) {
            // SAFETY: as above.
            return unsafe { Self::entry(cached) };
        }
        // Only an internal redirect, or a response a header filter
        // finalized (`ngx_http_filter_finalize_request`: a 412 of a failed
        // If-Match), wipes r->ctx: without either, no ctx means no state,
        // and the pool need not be searched (realip's test).
        if raw.internal() == 0 && raw.filter_finalize() == 0 {
            return None;
        }
        // SAFETY: the cleanup list of a live request's pool is well formed;
        // an entry with our handler, or our tag as its data, is one of ours.
        unsafe {
            let mut cln = (*raw.pool).cleanup;
            while let Some(c) = NonNull::new(cln) {
                // Our handler or tag marks our entries (ngx_http_realip_module's
                // way).
                if let Some(found) = Self::entry(c) {
                    r.set_module_ctx(cln.cast(), module);
                    return Some(found);
                }
                cln = (*cln).next;
            }
        }
        None
    }

    /// What one pool cleanup entry is, if it is one of ours: a state's
    /// has our handler, a mark's [`PASSED`]'s address as its data (and no
    /// handler: nginx's walk skips it). (Inline: the header filter asks
    /// of every response.)
    ///
    /// # Safety
    /// `c` is a live entry of a request pool's cleanup list.
    #[inline(always)]
    unsafe fn entry(c: NonNull<ngx_pool_cleanup_t>) -> Option<Found> {
        // SAFETY: per the contract.
        let (data, handler) = unsafe { ((*c.as_ptr()).data, (*c.as_ptr()).handler) };
        if data == passed_tag() {
            // A mark is its entry's `Passed` (its first field, `repr(C)`).
            return Some(Found::Passed(c.cast()));
        }
        if core::ptr::fn_addr_eq(handler?, cleanup as unsafe extern "C" fn(*mut c_void)) {
            return NonNull::new(data.cast()).map(Found::State);
        }
        None
    }

    /// The state of a request the straight path admitted, as the full
    /// path leaves it (`http::handler::decided`); its [`Passed`] entry is
    /// retired (its tag cleared: it has no handler, so nginx skips it, and
    /// now so do we).
    #[cold]
    fn made_of(r: &mut Request, passed: NonNull<Passed>) -> Option<NonNull<RequestState>> {
        // SAFETY: a `Passed` lives in the request's pool, written in full by
        // `Passed::attach`; no borrow of it is live.
        let passed = unsafe { &mut *passed.as_ptr() };
        // SAFETY: the location configuration outlives its requests.
        let policy = unsafe { passed.policy.as_ref() };
        let key = match passed.key {
            PassedKey::Made(key) => key,
            // The key the request was counted under: its address text then
            // (`key::default_key_of`).
            PassedKey::Address(text) => default_key_of(r, text)?,
        };
        let state = Self::attach(r, policy)?;
        // Retired once the state is made (it is found first: its entry is
        // the newer): a request that could not have its state made keeps
        // its mark, and is not counted again.
        passed.cleanup.data = ptr::null_mut();
        // SAFETY: just made in the request's pool; nothing else borrows it.
        let st = unsafe { &mut *state.as_ptr() };
        st.key = Some(key);
        st.decided = Some((Straight::decided(passed.verdict), passed.at_ms));
        st.resolution = Resolution::Passed;
        st.headers_sent = passed.headers_sent;
        Some(state)
    }

    /// Creates the state of a main request.
    pub fn attach(r: &mut Request, policy: &Policy) -> Option<NonNull<RequestState>> {
        let raw: *mut ngx_http_request_t = (&mut *r).into();
        // SAFETY: one allocation of the live request's pool holds a cleanup
        // entry and the state (as `ngx_pool_cleanup_add` makes them, in one
        // call to the pool instead of two); the state is written before the
        // entry is linked into the pool's list.
        unsafe {
            let pool = (*raw).pool;
            let both = nginx_sys::ngx_palloc(pool, size_of::<Attached>()).cast::<Attached>();
            if both.is_null() || !(both as usize).is_multiple_of(align_of::<Attached>()) {
                return None;
            }
            let cln = ptr::addr_of_mut!((*both).cleanup);
            let shield = ptr::addr_of_mut!((*both).state);
            ptr::write(
                shield,
                RequestState {
                    resolution: Resolution::Pending,
                    policy: NonNull::from(policy),
                    key: None,
                    key_values: None,
                    decision: None,
                    after_first: false,
                    decided: None,
                    headers_sent: false,
                    header_values: None,
                    waiter: None,
                    admin: None,
                    paid_bits: None,
                    signature: SignatureCheck::Verify,
                    earlier: None,
                    paid_before: false,
                    resume: core::mem::zeroed(),
                },
            );
            let event = &mut (*shield).resume;
            event.handler = Some(resume);
            event.data = raw.cast();
            event.log = (*(*raw).connection).log;
            cln.write(ngx_pool_cleanup_t {
                handler: Some(cleanup),
                data: shield.cast(),
                next: (*pool).cleanup,
            });
            (*pool).cleanup = cln;
            r.set_module_ctx(cln.cast(), PowShield::module());
            NonNull::new(shield)
        }
    }

    /// The policy of the location that decided. Its lifetime is the
    /// configuration's, not the state's: a borrow of it never holds the
    /// state.
    pub fn policy<'c>(&self) -> &'c Policy {
        // SAFETY: the location configuration outlives every request of its
        // cycle, and nothing writes it after configuration.
        unsafe { self.policy.as_ref() }
    }

    /// After an internal redirect, the request is decided again under
    /// `policy` (`decision::redirect`), with its keys evaluated there (the
    /// decision so far is in `earlier`).
    pub fn decide_again(
        &mut self,
        policy: &Policy,
        key: (*const u8, usize),
        key_values: Option<Evaluated>,
    ) {
        self.paid_before |= self.outcome() == Some(Outcome::Solved);
        self.resolution = Resolution::Pending;
        self.policy = NonNull::from(policy);
        self.key = Some(key);
        self.key_values = key_values;
        self.decision = None;
        self.after_first = false;
        self.decided = None;
        self.paid_bits = None;
    }

    /// A waiter that wakes this request.
    pub fn new_waiter(&mut self) -> Rc<Waiter> {
        let waiter = Waiter::reused(&mut self.resume);
        self.waiter = Some(waiter.clone());
        waiter
    }

    /// A waiter for the admin location's answer that wakes this request.
    pub fn new_admin_waiter(&mut self) -> Rc<Waiter<FromRedis>> {
        let waiter = Waiter::new(&mut self.resume);
        self.admin = Some(waiter.clone());
        waiter
    }

    /// The store's late answer, once it arrived (`None` while waiting).
    pub fn take_reply(&mut self) -> Option<Reply> {
        let reply = self.waiter.as_ref()?.take()?;
        if let Some(waiter) = self.waiter.take() {
            Waiter::recycle(waiter);
        }
        Some(reply)
    }

    /// The store answered at once: a waiter made for the call meanwhile
    /// (one the router then refused, `RedisStore::ask`) waits for nothing,
    /// and must not leave the request waiting when it comes back to the
    /// access phase (an internal redirect to another location).
    pub fn answered_now(&mut self) {
        if let Some(waiter) = self.waiter.take() {
            waiter.detach();
            Waiter::recycle(waiter);
        }
    }

    /// Whether a store's answer is still awaited.
    pub fn waiting(&self) -> bool {
        self.waiter.is_some()
    }

    pub fn outcome(&self) -> Option<Outcome> {
        self.decided.map(|(f, _)| f.outcome)
    }

    pub fn verdict(&self) -> Option<Verdict> {
        self.decided.and_then(|(f, _)| f.verdict)
    }

    pub fn status(&self) -> Option<BreakerStatus> {
        self.decided.and_then(|(f, _)| f.breaker)
    }

    /// The bits of the challenge sent, if one was; of a solved request,
    /// the price it paid.
    pub fn bits(&self) -> Option<u8> {
        match self.outcome() {
            Some(Outcome::Solved) => self.paid_bits,
            _ => self.decided.and_then(|(f, _)| f.bits()),
        }
    }
}

impl Drop for RequestState {
    fn drop(&mut self) {
        // A store may still answer: make sure it never touches this request.
        if let Some(waiter) = self.waiter.take() {
            waiter.detach();
        }
        if let Some(waiter) = self.admin.take() {
            waiter.detach();
        }
        if self.resume.posted() != 0 {
            // SAFETY: the event is in nginx's posted queue; unlink it before
            // its memory (the request pool) goes away.
            unsafe { nginx_sys::ngx_delete_posted_event(&mut self.resume) };
        }
    }
}

/// The pool cleanup: the request is finished (normally or not).
unsafe extern "C" fn cleanup(data: *mut c_void) {
    crate::ffi::guard((), || {
        // SAFETY: `data` is the RequestState written by `attach`, dropped once
        // here.
        unsafe { ptr::drop_in_place(data.cast::<RequestState>()) }
    })
}

/// What the pool cleanup entry of a request the straight path admitted
/// points to, instead of a handler (nothing to drop): the mark's tag,
/// which no other entry's data is (every other is its owner's memory).
static PASSED: u8 = 0;

/// [`PASSED`]'s address, as an entry's data.
#[inline(always)]
fn passed_tag() -> *mut c_void {
    ptr::addr_of!(PASSED).cast_mut().cast()
}

/// The resume event's handler: the store answered; run the phases again.
unsafe extern "C" fn resume(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: the event belongs to a live request's state (its cleanup
        // deletes the event before the request goes away); data is the
        // request.
        unsafe {
            let r = (*ev).data.cast::<ngx_http_request_t>();
            let c = (*r).connection;
            (*r).read_event_handler = Some(nginx_sys::ngx_http_block_reading);
            (*r).write_event_handler = Some(nginx_sys::ngx_http_core_run_phases);
            nginx_sys::ngx_http_core_run_phases(r);
            nginx_sys::ngx_http_run_posted_requests(c);
        }
    })
}

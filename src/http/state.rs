//! Per-request state, kept once per main request.
//!
//! Internal redirects (`index`, `try_files`, `error_page`) wipe `r->ctx` and
//! re-run the access phase; the state is therefore found through its own
//! entry in the request pool's cleanup list (as `ngx_http_realip_module`
//! does), so that a request is counted once.

use core::ffi::c_void;
use core::mem::size_of;
use core::ptr::{self, NonNull};
use std::rc::Rc;

use nginx_sys::{ngx_event_t, ngx_http_request_t, ngx_pool_cleanup_add};
use ngx::http::{HttpModule, Request};

use crate::config::Policy;
use crate::protocol::Solved;
use crate::store::Waiter;
use crate::PowShield;
use pow_shield_core::decision::{Decision, Outcome};
use pow_shield_core::limiter::strikes::Standing;
use pow_shield_core::limiter::Verdict;

/// The store operation a request waits for.
#[derive(Clone, Copy)]
pub enum Waiting {
    Check { offence: bool },
    Spend(Solved),
    Strike,
}

/// Where a request is in its decision.
#[derive(Clone, Copy)]
pub enum Stage {
    /// Nothing asked yet.
    Start,
    /// Waiting for a store's answer.
    Waiting(Waiting),
    /// Decided to let it through; later runs of the access phase pass too.
    Passed,
    /// Answered with this status.
    Answered(u16),
}

/// The shield's state for one main request.
pub struct Shield {
    pub stage: Stage,
    /// The policy of the location that decided (headers use it too).
    pub policy: Policy,
    /// The client key once evaluated (request pool memory).
    pub key: Option<(*const u8, usize)>,
    /// The decision in progress (kept across store round trips).
    pub decision: Option<Decision>,
    pub verdict: Option<Verdict>,
    /// The client's red-zone standing, as the store reported it.
    pub standing: Option<Standing>,
    /// The difficulty of the challenge sent, if one was.
    pub difficulty: Option<u8>,
    /// When a zone with no room may take the request (its `Retry-After`).
    pub retry_after_ms: Option<u64>,
    /// Epoch ms when the verdict was made (for `X-RateLimit-Reset`).
    pub decided_at_ms: u64,
    pub outcome: Option<Outcome>,
    /// A store recorded a strike for this request (for metrics).
    pub struck: bool,
    /// The rate-limit headers were added to the response.
    pub headers_sent: bool,
    /// The pending store operation, if any.
    pub waiter: Option<Rc<Waiter>>,
    /// Posted by the store when a pending answer arrives.
    resume: ngx_event_t,
}

impl Shield {
    /// This request's state, if it has one. A pointer, not a reference: the
    /// handler and the header filter reach the same state, and each takes
    /// only short borrows of it.
    pub fn find(r: &Request) -> Option<NonNull<Shield>> {
        let module = PowShield::module();
        let raw: &ngx_http_request_t = r.as_ref();
        // SAFETY: r->ctx has a slot per module; ours is null or a Shield in
        // this request's pool.
        let cached = unsafe { *raw.ctx.add(module.ctx_index) }.cast::<Shield>();
        if let Some(cached) = NonNull::new(cached) {
            return Some(cached);
        }
        // Only an internal redirect wipes r->ctx: without one, no ctx means
        // no state, and the pool need not be searched.
        if raw.internal() == 0 {
            return None;
        }
        // SAFETY: the cleanup list of a live request's pool is well formed;
        // an entry with our handler holds a Shield in its data.
        unsafe {
            let mut cln = (*raw.pool).cleanup;
            while let Some(c) = cln.as_ref() {
                // Our handler marks our entry (ngx_http_realip_module's way).
                if c.handler.is_some_and(|h| {
                    core::ptr::fn_addr_eq(h, cleanup as unsafe extern "C" fn(*mut c_void))
                }) {
                    r.set_module_ctx(c.data, module);
                    return NonNull::new(c.data.cast::<Shield>());
                }
                cln = c.next;
            }
        }
        None
    }

    /// Creates the state of a main request.
    pub fn attach(r: &mut Request, policy: Policy) -> Option<NonNull<Shield>> {
        let raw: *mut ngx_http_request_t = (&mut *r).into();
        // SAFETY: adds a cleanup entry (with room for a Shield) to the pool of
        // a live request; the Shield is written before the handler is set.
        unsafe {
            let cln = ngx_pool_cleanup_add((*raw).pool, size_of::<Shield>());
            if cln.is_null() {
                return None;
            }
            let shield = (*cln).data.cast::<Shield>();
            if !(shield as usize).is_multiple_of(core::mem::align_of::<Shield>()) {
                return None;
            }
            ptr::write(
                shield,
                Shield {
                    stage: Stage::Start,
                    policy,
                    key: None,
                    decision: None,
                    verdict: None,
                    standing: None,
                    difficulty: None,
                    retry_after_ms: None,
                    decided_at_ms: 0,
                    outcome: None,
                    struck: false,
                    headers_sent: false,
                    waiter: None,
                    resume: core::mem::zeroed(),
                },
            );
            let resume = &mut (*shield).resume;
            resume.handler = Some(super::handler::resume);
            resume.data = raw.cast();
            resume.log = (*(*raw).connection).log;
            (*cln).handler = Some(cleanup);
            r.set_module_ctx(shield.cast(), PowShield::module());
            NonNull::new(shield)
        }
    }

    /// A waiter that wakes this request.
    pub fn new_waiter(&mut self) -> Rc<Waiter> {
        let waiter = Waiter::new(&mut self.resume);
        self.waiter = Some(waiter.clone());
        waiter
    }
}

impl Drop for Shield {
    fn drop(&mut self) {
        // A store may still answer: make sure it never touches this request.
        if let Some(waiter) = self.waiter.take() {
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
        // SAFETY: `data` is the Shield written by `attach`, dropped once here.
        unsafe { ptr::drop_in_place(data.cast::<Shield>()) }
    })
}

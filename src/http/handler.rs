//! The access-phase handler: key → store verdict → green / yellow → response
//! (SPEC §3). Waiting on a store returns `NGX_AGAIN`; the store posts the
//! request's resume event and the phase runs again (as `limit_req`'s delay
//! does), picking up where it stopped.

use core::ptr::NonNull;
use std::rc::Rc;

use nginx_sys::{ngx_event_t, ngx_http_request_t, ngx_uint_t};
use ngx::core::Status;
use ngx::http::{HttpModuleLocationConf, HttpModuleMainConf, Request};

use super::response;
use super::state::{Outcome, Shield, Stage};
use crate::config::values::FailPolicy;
use crate::config::{MainConf, Policy};
use crate::ffi::{bytes, monotonic_ms, now_ms};
use crate::limiter::{RateLimit, Verdict};
use crate::pow::{self, Rejection, Solved};
use crate::store::{self, Answer, Poll, Store, Waiter};
use crate::PowShield;

/// Entry point from nginx's access phase.
pub extern "C" fn access_handler(r: *mut ngx_http_request_t) -> isize {
    crate::ffi::guard(Status::NGX_ERROR.0, || {
        // SAFETY: nginx passes a live request to phase handlers.
        let r = unsafe { Request::from_ngx_http_request(r) };
        decide(r).0
    })
}

fn decide(r: &mut Request) -> Status {
    // Subrequests are never counted; the main request was.
    if !r.is_main() {
        return Status::NGX_DECLINED;
    }
    let (Some(lcf), Some(mcf)) = (PowShield::location_conf(r), PowShield::main_conf(r)) else {
        return Status::NGX_DECLINED;
    };
    // Unshielded locations cost nothing, even after an internal redirect
    // from a shielded one (that request was decided already).
    if lcf.policy.limit.is_none() {
        return Status::NGX_DECLINED;
    }
    let shield = match Shield::find(r) {
        Some(shield) => shield,
        None => match Shield::attach(r, lcf.policy) {
            Some(shield) => shield,
            None => return Status::NGX_ERROR,
        },
    };
    // The limit of the location that first decided (internal redirects
    // keep the first decision).
    // SAFETY: the state lives in the request's pool; read briefly.
    let Some(limit) = unsafe { shield.as_ref() }.policy.limit else {
        return Status::NGX_DECLINED;
    };
    Flow {
        r,
        mcf,
        shield,
        limit,
    }
    .run()
}

/// One run of the decision for a request.
struct Flow<'a> {
    r: &'a mut Request,
    mcf: &'a MainConf,
    /// The request's state. Held as a pointer and borrowed briefly: sending a
    /// response runs the header filter, which updates the same state.
    shield: NonNull<Shield>,
    limit: RateLimit,
}

impl Flow<'_> {
    fn shield(&mut self) -> &mut Shield {
        // SAFETY: the state lives in the request's pool for the whole run;
        // callers never hold this borrow across sending a response.
        unsafe { self.shield.as_mut() }
    }

    fn run(&mut self) -> Status {
        match self.shield().stage {
            Stage::Start => self.start(),
            Stage::Checking => match self.take_answer() {
                Some(Answer::Verdict(verdict)) => self.judge(verdict),
                Some(_) => self.check_unavailable(),
                None => Status::NGX_AGAIN,
            },
            Stage::Spending(solved) => match self.take_answer() {
                Some(Answer::Spent(first)) => self.spent(first),
                Some(_) => self.spend_unavailable(solved),
                None => Status::NGX_AGAIN,
            },
            Stage::Passed => Status::NGX_DECLINED,
            // The request was answered; nothing may run it further.
            Stage::Answered => Status::NGX_DONE,
        }
    }

    fn policy(&self) -> Policy {
        // SAFETY: as in `shield`; a copy, no borrow outlives this call.
        unsafe { self.shield.as_ref() }.policy
    }

    /* green: count the request */

    fn start(&mut self) -> Status {
        let Some(key) = self.client_key() else {
            return Status::NGX_ERROR;
        };
        if key.is_empty() {
            return self.pass(Outcome::Exempt);
        }
        let Some(store) = store::primary(self.mcf) else {
            return self.pass(Outcome::Pass);
        };
        match store.check(key, self.limit, monotonic_ms(), &mut self.waiters()) {
            Poll::Ready(verdict) => self.judge(verdict),
            Poll::Pending => self.wait(Stage::Checking),
            Poll::Unavailable => self.check_unavailable(),
            Poll::Full { retry_after_ms } => {
                self.refuse_full("request not counted", retry_after_ms)
            }
        }
    }

    /// The client key, in the request pool (no copy).
    fn client_key(&self) -> Option<&[u8]> {
        // SAFETY: the key is a complex value compiled at configuration time.
        let cv = unsafe { self.policy().key.as_ref() }?;
        self.r.get_complex_value(cv).map(|v| v.as_bytes())
    }

    /// Makes the request's waiter when a store asks for one. It holds only
    /// the state pointer, so it borrows nothing from the flow.
    fn waiters(&self) -> impl FnMut() -> Rc<Waiter> {
        let mut shield = self.shield;
        // SAFETY: the state lives in the request's pool for the whole run,
        // and no other borrow of it is live while a store runs.
        move || unsafe { shield.as_mut() }.new_waiter()
    }

    fn judge(&mut self, verdict: Verdict) -> Status {
        self.shield().verdict = Some(verdict);
        self.shield().decided_at_ms = now_ms();
        if verdict.allowed {
            return self.pass(Outcome::Pass);
        }
        self.yellow()
    }

    /* yellow: over the limit */

    fn yellow(&mut self) -> Status {
        let token = header_in(self.r, "x-pow-challenge");
        let nonce = header_in(self.r, "x-pow-nonce");
        if token.is_none() && nonce.is_none() {
            self.log_reject("over the limit, challenge sent");
            return self.reject(Outcome::Challenge, |f| f.send_challenge(429, None));
        }
        let Some(keys) = self.mcf.keys.as_ref() else {
            return Status::NGX_ERROR;
        };
        let policy = self.policy();
        let verified = pow::verify_solution(
            keys,
            token,
            nonce,
            &client_addr(self.r),
            policy.difficulty,
            now_ms(),
            policy.challenge_ttl_ms,
        );
        match verified {
            Ok(solved) => self.spend(solved),
            Err(rejection) => self.rejected(rejection),
        }
    }

    fn rejected(&mut self, rejection: Rejection) -> Status {
        self.log_reject(&format!("solution rejected: {}", rejection.reason()));
        let (status, message) = (rejection.status(), rejection.message());
        if rejection.wants_fresh_challenge() {
            self.reject(Outcome::Invalid, |f| {
                f.send_challenge(status, Some(message))
            })
        } else {
            self.reject(Outcome::Invalid, |f| {
                response::send_error(f.r, status, message)
            })
        }
    }

    fn spend(&mut self, solved: Solved) -> Status {
        let Some(store) = store::primary(self.mcf) else {
            return self.spent(true);
        };
        let until_ms = solved.spent_until_ms(self.mcf.longest_challenge_ttl_ms);
        let waiters = &mut self.waiters();
        match store.spend(&solved.digest, until_ms, now_ms(), waiters) {
            Poll::Ready(first) => self.spent(first),
            Poll::Pending => self.wait(Stage::Spending(solved)),
            Poll::Unavailable => self.spend_unavailable(solved),
            Poll::Full { retry_after_ms } => {
                self.refuse_full("solution not recorded", retry_after_ms)
            }
        }
    }

    fn spent(&mut self, first: bool) -> Status {
        if first {
            return self.pass(Outcome::Solved);
        }
        self.log_reject("solution rejected: spent");
        self.reject(Outcome::Invalid, |f| {
            f.send_challenge(pow::SPENT_STATUS, Some(pow::SPENT_MESSAGE))
        })
    }

    /* the store failed: pow_shield_fail decides */

    fn check_unavailable(&mut self) -> Status {
        match self.fallback() {
            Fallback::Local(store) => {
                let Some(key) = self.client_key() else {
                    return Status::NGX_ERROR;
                };
                match store.check(key, self.limit, monotonic_ms(), &mut self.waiters()) {
                    Poll::Ready(verdict) => self.judge(verdict),
                    Poll::Full { retry_after_ms } => {
                        self.refuse_full("request not counted", retry_after_ms)
                    }
                    // The local store always answers at once.
                    _ => self.pass(Outcome::Pass),
                }
            }
            Fallback::Open => self.pass(Outcome::Pass),
            Fallback::Refuse => self.refuse_unavailable(),
        }
    }

    fn spend_unavailable(&mut self, solved: Solved) -> Status {
        match self.fallback() {
            Fallback::Local(store) => {
                let until_ms = solved.spent_until_ms(self.mcf.longest_challenge_ttl_ms);
                let waiters = &mut self.waiters();
                match store.spend(&solved.digest, until_ms, now_ms(), waiters) {
                    Poll::Ready(first) => self.spent(first),
                    Poll::Full { retry_after_ms } => {
                        self.refuse_full("solution not recorded", retry_after_ms)
                    }
                    // The local store always answers at once.
                    _ => self.pass(Outcome::Solved),
                }
            }
            Fallback::Open => self.pass(Outcome::Solved),
            Fallback::Refuse => self.refuse_unavailable(),
        }
    }

    fn fallback(&self) -> Fallback {
        // pow_shield_fail is about Redis; the local store always answers.
        if !store::redis_configured() {
            return Fallback::Open;
        }
        match self.policy().fail {
            FailPolicy::Local => match store::local(self.mcf) {
                Some(store) => Fallback::Local(store),
                None => Fallback::Open,
            },
            FailPolicy::Open => Fallback::Open,
            FailPolicy::Closed if self.trusted() => Fallback::Open,
            FailPolicy::Closed => Fallback::Refuse,
        }
    }

    /// `trusted=` of `pow_shield_fail closed`: non-empty and not "0".
    fn trusted(&self) -> bool {
        // SAFETY: compiled at configuration time when set.
        let Some(cv) = (unsafe { self.policy().trusted.as_ref() }) else {
            return false;
        };
        matches!(self.r.get_complex_value(cv), Some(v) if !v.is_empty() && v.as_bytes() != b"0")
    }

    fn refuse_unavailable(&mut self) -> Status {
        self.log_reject("rate limiter store unavailable, refused (pow_shield_fail closed)");
        let retry_after_ms = store::redis_retry_in_ms().unwrap_or(1000);
        self.reject(Outcome::Unavailable, |f| {
            response::send_unavailable(f.r, retry_after_ms)
        })
    }

    /// The zone is full of unexpired spent records: nothing may pass
    /// unrecorded (an unrecorded solution could be replayed).
    fn refuse_full(&mut self, what: &str, retry_after_ms: u64) -> Status {
        self.log_reject(&format!(
            "zone \"pow_shield\" is full of spent challenges: {what}, refused"
        ));
        self.reject(Outcome::Unavailable, |f| {
            response::send_unavailable(f.r, retry_after_ms)
        })
    }

    /* endings */

    fn pass(&mut self, outcome: Outcome) -> Status {
        self.shield().outcome = Some(outcome);
        self.shield().stage = Stage::Passed;
        Status::NGX_DECLINED
    }

    /// Answers with `send`, unless this is a dry run: then logs and passes.
    fn reject(&mut self, outcome: Outcome, send: impl FnOnce(&mut Self) -> Status) -> Status {
        self.shield().outcome = Some(outcome);
        if self.policy().dry_run {
            self.shield().stage = Stage::Passed;
            return Status::NGX_DECLINED;
        }
        self.shield().stage = Stage::Answered;
        send(self)
    }

    fn wait(&mut self, stage: Stage) -> Status {
        self.shield().stage = stage;
        let raw: &mut ngx_http_request_t = self.r.as_mut();
        // While waiting, a client that goes away finalizes the request (and
        // the pool cleanup detaches the waiter); writes must not re-run phases.
        raw.read_event_handler = Some(nginx_sys::ngx_http_test_reading);
        raw.write_event_handler = Some(nginx_sys::ngx_http_request_empty_handler);
        Status::NGX_AGAIN
    }

    fn take_answer(&mut self) -> Option<Answer> {
        let answer = self.shield().waiter.as_ref().and_then(|w| w.take());
        if answer.is_some() {
            self.shield().waiter = None;
        }
        answer
    }

    fn send_challenge(&mut self, status: u16, error: Option<&str>) -> Status {
        let Some(keys) = self.mcf.keys.as_ref() else {
            return Status::NGX_ERROR;
        };
        let policy = self.policy();
        let challenge =
            match pow::issue_challenge(keys, &client_addr(self.r), now_ms(), policy.difficulty) {
                Ok(challenge) => challenge,
                Err(_) => return Status::NGX_ERROR,
            };
        let retry_after_ms = self.shield().verdict.map(|v| v.retry_after_ms);
        response::send_challenge(
            self.r,
            status,
            error,
            &challenge,
            policy.challenge_ttl_ms,
            retry_after_ms.filter(|_| status == 429),
        )
    }

    fn log_reject(&self, what: &str) {
        let policy = self.policy();
        let prefix = if policy.dry_run {
            "dry run, not enforced: "
        } else {
            ""
        };
        let level: ngx_uint_t = policy.log_level;
        log_at!(level, self.r.log(), "pow_shield: {prefix}{what}");
    }
}

enum Fallback {
    Local(store::ShmStore),
    Open,
    Refuse,
}

/// The resume event's handler: the store answered; run the phases again.
pub unsafe extern "C" fn resume(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: the event belongs to a live request's Shield (its cleanup
        // deletes the event before the request goes away); data is the request.
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

/// The first request header called `name` (lower-case), if any.
fn header_in<'r>(r: &'r Request, name: &str) -> Option<&'r [u8]> {
    r.headers_in_iterator()
        .find(|(key, _)| key.as_bytes().eq_ignore_ascii_case(name.as_bytes()))
        .map(|(_, value)| value.as_bytes())
}

/// `$remote_addr` (after realip): what challenges are bound to.
fn client_addr(r: &Request) -> String {
    // SAFETY: a request's connection is live while the request is.
    let c = unsafe { &*r.connection() };
    String::from_utf8_lossy(bytes(&c.addr_text)).into_owned()
}

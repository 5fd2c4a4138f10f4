//! The access-phase handler: it carries out the steps of the pure decision
//! (`pow_shield_core::decision`): ask a store, then pass or answer. Waiting on a store
//! returns `NGX_AGAIN`; the store posts the request's resume event and the
//! phase runs again (as `limit_req`'s delay does), picking up where it
//! stopped.

use core::ptr::NonNull;
use std::rc::Rc;

use nginx_sys::{ngx_event_t, ngx_http_request_t, ngx_uint_t};
use ngx::core::Status;
use ngx::http::{HttpModuleLocationConf, HttpModuleMainConf, Request};

use super::response;
use super::state::{Shield, Stage, Waiting};
use crate::config::{MainConf, Policy};
use crate::ffi::{bytes, monotonic_ms, now_ms};
use crate::protocol;
use crate::store::{self, CheckArgs, Op, Poll, SpendArgs, Stores, Waiter};
use crate::PowShield;
use pow_shield_core::decision::{Answer, Carried, Checked, Decision, End, Outcome, Reply, Step};
use pow_shield_core::limiter::strikes::{Block, Standing, Tripped};
use pow_shield_core::limiter::Spent;
use pow_shield_core::metrics;

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
    if lcf.policy.limit.is_none() && !lcf.policy.trap {
        return Status::NGX_DECLINED;
    }
    let shield = match Shield::find(r) {
        Some(shield) => shield,
        None => match Shield::attach(r, lcf.policy) {
            Some(shield) => shield,
            None => return Status::NGX_ERROR,
        },
    };
    Flow { r, mcf, shield }.run()
}

/// One run of the handler for a request.
struct Flow<'a> {
    r: &'a mut Request,
    mcf: &'a MainConf,
    /// The request's state. Held as a pointer and borrowed briefly: sending a
    /// response runs the header filter, which updates the same state.
    shield: NonNull<Shield>,
}

impl Flow<'_> {
    fn shield(&mut self) -> &mut Shield {
        // SAFETY: the state lives in the request's pool for the whole run;
        // callers never hold this borrow across sending a response.
        unsafe { self.shield.as_mut() }
    }

    /// The policy of the location that first decided (internal redirects
    /// keep the first decision).
    fn policy(&self) -> Policy {
        // SAFETY: as in `shield`; a copy, no borrow outlives this call.
        unsafe { self.shield.as_ref() }.policy
    }

    fn run(&mut self) -> Status {
        match self.shield().stage {
            Stage::Start => self.start(),
            Stage::Waiting(waiting) => match self.take_answer() {
                Some(answer) => self.resume(waiting, answer),
                None => Status::NGX_AGAIN,
            },
            Stage::Passed => Status::NGX_DECLINED,
            // The phases run again after we answered: `post_action`, or an
            // `error_page` for a response nginx made instead of ours (a body
            // it could not read). The first lets the operator's action run;
            // the second gets our decision again, never the content.
            Stage::Answered(status) => {
                let raw: &ngx_http_request_t = self.r.as_ref();
                if raw.post_action() != 0 {
                    Status::NGX_DECLINED
                } else {
                    Status(status as isize)
                }
            }
        }
    }

    fn start(&mut self) -> Status {
        let Some(exempt) = self.client_key().map(<[u8]>::is_empty) else {
            return Status::NGX_ERROR;
        };
        let policy = self.policy();
        let carried = if policy.limit.is_some() && !exempt {
            self.carried()
        } else {
            Carried::Nothing
        };
        let decision = Decision::new(policy.rules(), carried);
        self.shield().decision = Some(decision);
        self.carry_out(decision.start(exempt))
    }

    /// The solution the request carries, verified now: a refusal's strike
    /// is then written in the check's round trip. Only consulted when the
    /// client is over its limit.
    fn carried(&self) -> Carried {
        let (token, nonce) = pow_headers(self.r);
        if token.is_none() && nonce.is_none() {
            return Carried::Nothing;
        }
        let Some(keys) = self.mcf.keys.as_ref() else {
            return Carried::Nothing;
        };
        let policy = self.policy();
        let verified = protocol::verify_solution(
            keys,
            token,
            nonce,
            &client_addr(self.r),
            policy.difficulty.base,
            now_ms(),
            policy.challenge_ttl_ms,
        );
        match verified {
            Ok(solved) => Carried::Valid(solved),
            Err(rejection) => Carried::Invalid(rejection),
        }
    }

    /// Carries out steps until one waits on a store or the decision ends.
    fn carry_out(&mut self, mut step: Step) -> Status {
        loop {
            let waiting = match step {
                Step::End(end) => return self.end(end),
                Step::Check { offence } => Waiting::Check { offence },
                Step::Spend(solved) => Waiting::Spend(solved),
                Step::Strike => Waiting::Strike,
            };
            step = match self.ask(waiting, false) {
                Some(step) => step,
                None => return self.wait(waiting),
            };
        }
    }

    /// A store answered late: the next step (the fallback decides a
    /// failure).
    fn resume(&mut self, waiting: Waiting, answer: store::Answer) -> Status {
        let replied = match (waiting, answer) {
            (Waiting::Check { offence }, store::Answer::Checked(c)) => {
                Replied::Checked(Reply::Ready(c), offence)
            }
            (Waiting::Spend(_), store::Answer::Spent(first)) => Replied::Spent(Reply::Ready(first)),
            (Waiting::Strike, store::Answer::Struck(s)) => Replied::Struck(Reply::Ready(s)),
            // The store failed it: the fallback (which answers at once).
            _ => match self.ask(waiting, true) {
                Some(step) => return self.carry_out(step),
                None => return Status::NGX_ERROR,
            },
        };
        let step = self.next(replied);
        self.carry_out(step)
    }

    /// Asks the stores for `waiting`'s operation; `None` when the answer
    /// comes later. `fallback`: the primary already failed it.
    fn ask(&mut self, waiting: Waiting, fallback: bool) -> Option<Step> {
        let policy = self.policy();
        let (Some(stores), Some(key)) = (Stores::new(self.mcf, policy.fail), self.client_key())
        else {
            // No zone to decide with (nginx could not map it): let it through.
            return Some(Step::End(End::pass(Outcome::Pass)));
        };
        let (monotonic, epoch) = (monotonic_ms(), now_ms());
        let red = policy.red;
        let replied = match waiting {
            Waiting::Check { offence } => {
                // The decision checks only where a limit is set.
                let Some(limit) = policy.limit else {
                    return Some(Step::End(End::pass(Outcome::Pass)));
                };
                let args = CheckArgs {
                    key,
                    limit,
                    approx: policy.approx,
                    rules: red,
                    offence,
                };
                let reply = self.poll(&stores, fallback, |s, w| s.check(args, monotonic, w))?;
                Replied::Checked(reply, offence)
            }
            Waiting::Spend(solved) => {
                let args = SpendArgs {
                    key,
                    rules: red,
                    digest: &solved.digest,
                    expires_at_ms: solved.spent_until_ms(self.mcf.longest_challenge_ttl_ms),
                };
                Replied::Spent(
                    self.poll(&stores, fallback, |s, w| s.spend(args, epoch, monotonic, w))?,
                )
            }
            Waiting::Strike => Replied::Struck(
                self.poll(&stores, fallback, |s, w| s.strike(key, red, monotonic, w))?,
            ),
        };
        Some(self.next(replied))
    }

    /// The decision's next step for a store's reply.
    fn next(&mut self, replied: Replied) -> Step {
        // `start` made the decision before any store was asked.
        let Some(mut decision) = self.shield().decision else {
            return Step::End(End::pass(Outcome::Pass));
        };
        let red = self.policy().red;
        let step = match replied {
            Replied::Checked(reply, offence) => {
                if let Reply::Ready(c) = reply {
                    let blocked = c.standing.block != Block::Clear;
                    let struck = metrics::check_struck(offence, c.verdict.allowed, blocked, red);
                    self.shield().struck |= struck;
                }
                self.checked(&mut decision, reply)
            }
            Replied::Spent(reply) => {
                if let Reply::Ready(Spent::Blocked(standing) | Spent::Accepted(standing)) = reply {
                    self.shield().standing = Some(standing);
                }
                decision.spent(reply, || self.trusted())
            }
            Replied::Struck(reply) => {
                if let Reply::Ready(standing) = reply {
                    let blocked = standing.block != Block::Clear;
                    self.shield().struck |= metrics::strike_struck(blocked, red);
                    self.shield().standing = Some(standing);
                }
                decision.struck(reply)
            }
        };
        self.shield().decision = Some(decision);
        step
    }

    /// Runs one store operation; `None` while it is pending.
    fn poll<T>(&self, stores: &Stores, fallback: bool, op: impl Op<T>) -> Option<Reply<T>> {
        let poll = if fallback {
            stores.fallback(op)
        } else {
            stores.run(op, &mut self.waiters())
        };
        match poll {
            Poll::Ready(value) => Some(Reply::Ready(value)),
            // (A busy Redis was handed to the zone by the chain.)
            Poll::Down | Poll::Busy => Some(Reply::Down),
            Poll::Full { retry_after_ms } => {
                let mut shield = self.shield;
                // SAFETY: the state lives in the request's pool for the whole
                // run; the store has returned, so no other borrow is live.
                unsafe { shield.as_mut() }.retry_after_ms = Some(retry_after_ms);
                Some(Reply::Full)
            }
            Poll::Pending => None,
        }
    }

    /// Records the check's verdict (headers, variables) and decides.
    fn checked(&mut self, decision: &mut Decision, reply: Reply<Checked>) -> Step {
        if let Reply::Ready(checked) = reply {
            let shield = self.shield();
            shield.standing = Some(checked.standing);
            if checked.standing.block == Block::Clear {
                shield.verdict = Some(checked.verdict);
                shield.decided_at_ms = now_ms();
            }
        }
        let step = decision.checked(reply, || self.trusted());
        if let Step::End(End {
            answer: Some(Answer::Challenge { difficulty, .. }),
            ..
        }) = step
        {
            self.shield().difficulty = Some(difficulty);
        }
        step
    }

    /// The client key, in the request pool (no copy), evaluated once per
    /// request: every store operation of the request uses it.
    fn client_key(&self) -> Option<&[u8]> {
        let mut shield = self.shield;
        // SAFETY: the state lives in the request's pool for the whole run,
        // and no other borrow of it is live while the key is read or set.
        let shield = unsafe { shield.as_mut() };
        if shield.key.is_none() {
            // SAFETY: the key is a complex value compiled at configuration time.
            let cv = unsafe { self.policy().key.as_ref() }?;
            let key = self.r.get_complex_value(cv)?.as_bytes();
            shield.key = Some((key.as_ptr(), key.len()));
        }
        match shield.key {
            Some((_, 0)) | None => Some(&[]),
            // SAFETY: the value was made in the request's pool, which lives
            // as long as the request.
            Some((data, len)) => Some(unsafe { core::slice::from_raw_parts(data, len) }),
        }
    }

    /// Makes the request's waiter when a store asks for one. It holds only
    /// the state pointer, so it borrows nothing from the flow.
    fn waiters(&self) -> impl FnMut() -> Rc<Waiter> {
        let mut shield = self.shield;
        // SAFETY: the state lives in the request's pool for the whole run,
        // and no other borrow of it is live while a store runs.
        move || unsafe { shield.as_mut() }.new_waiter()
    }

    /// `trusted=` of `pow_shield_fail closed`: non-empty and not "0".
    fn trusted(&self) -> bool {
        // SAFETY: compiled at configuration time when set.
        let Some(cv) = (unsafe { self.policy().trusted.as_ref() }) else {
            return false;
        };
        matches!(self.r.get_complex_value(cv), Some(v) if !v.is_empty() && v.as_bytes() != b"0")
    }

    /* endings */

    fn end(&mut self, end: End) -> Status {
        self.shield().outcome = Some(end.outcome);
        let tripped = self.shield().standing.and_then(|s| s.tripped);
        metrics::request(&metrics::Decided {
            end,
            trap: self.policy().trap,
            struck: self.shield().struck,
            tripped,
        });
        if let Some(tripped) = tripped {
            self.log_tripped(tripped);
        }
        if !end.reason.is_empty() {
            self.log_reject(&end);
        }
        let Some(answer) = end.answer else {
            self.shield().stage = Stage::Passed;
            return Status::NGX_DECLINED;
        };
        let status = self.status_of(answer);
        // nginx makes the trap's 404, and the operator's error_page for it
        // runs the phases again: that page is served, as for any missing page.
        self.shield().stage = match answer {
            Answer::NotFound => Stage::Passed,
            _ => Stage::Answered(status),
        };
        self.send(answer, status)
    }

    fn status_of(&self, answer: Answer) -> u16 {
        match answer {
            Answer::Challenge { status, .. } | Answer::Error { status, .. } => status,
            Answer::Block(_) => self.policy().block_status,
            Answer::Unavailable => 503,
            Answer::NotFound => 404,
        }
    }

    fn send(&mut self, answer: Answer, status: u16) -> Status {
        match answer {
            Answer::Challenge {
                status,
                error,
                difficulty,
            } => self.send_challenge(status, error, difficulty),
            Answer::Error { status, message } => response::send_error(self.r, status, message),
            // nginx closes the connection for 444 (as `return 444` does).
            Answer::Block(_) if status == 444 => Status(444),
            Answer::Block(block) => response::send_blocked(self.r, status, block),
            Answer::Unavailable => {
                let retry_after_ms = self
                    .shield()
                    .retry_after_ms
                    .or_else(store::redis_retry_in_ms)
                    .unwrap_or(1000);
                response::send_unavailable(self.r, retry_after_ms)
            }
            // nginx's own 404 (and the operator's error_page): a trap looks
            // like any missing page.
            Answer::NotFound => Status(404),
        }
    }

    fn wait(&mut self, waiting: Waiting) -> Status {
        self.shield().stage = Stage::Waiting(waiting);
        let raw: &mut ngx_http_request_t = self.r.as_mut();
        // While waiting, a client that goes away finalizes the request (and
        // the pool cleanup detaches the waiter); writes must not re-run phases.
        raw.read_event_handler = Some(nginx_sys::ngx_http_test_reading);
        raw.write_event_handler = Some(nginx_sys::ngx_http_request_empty_handler);
        Status::NGX_AGAIN
    }

    fn take_answer(&mut self) -> Option<store::Answer> {
        let answer = self.shield().waiter.as_ref().and_then(|w| w.take());
        if answer.is_some() {
            self.shield().waiter = None;
        }
        answer
    }

    fn send_challenge(&mut self, status: u16, error: Option<&str>, difficulty: u8) -> Status {
        let Some(keys) = self.mcf.keys.as_ref() else {
            return Status::NGX_ERROR;
        };
        let (addr, ttl_ms) = (client_addr(self.r), self.policy().challenge_ttl_ms);
        let challenge = match protocol::issue_challenge(keys, &addr, now_ms(), ttl_ms, difficulty) {
            Ok(challenge) => challenge,
            Err(_) => return Status::NGX_ERROR,
        };
        let retry_after_ms = self.shield().verdict.map(|v| v.retry_after_ms);
        response::send_challenge(
            self.r,
            status,
            error,
            &challenge,
            self.policy().challenge_ttl_ms,
            retry_after_ms.filter(|_| status == 429),
        )
    }

    /// One line per breaker opening and per ban, in a format that stays
    /// (fail2ban's filter reads it): `key=address` when the key is the
    /// client address (what a firewall can act on), else `key=custom`.
    fn log_tripped(&self, tripped: Tripped) {
        let policy = self.policy();
        let prefix = if policy.dry_run {
            "dry run, not enforced: "
        } else {
            ""
        };
        let client = client_addr(self.r);
        let kind = if policy.default_key {
            "address"
        } else {
            "custom"
        };
        let level: ngx_uint_t = policy.breaker_log_level;
        let (strikes, block_s) = policy
            .red
            .strikes
            .map_or((0, 0), |s| (s.threshold, s.ttl_ms.div_ceil(1000)));
        log_at!(
            level,
            self.r.log(),
            "pow_shield: {prefix}breaker opened: client={client} key={kind} strikes={strikes} \
             for={block_s}s"
        );
        if let (Tripped::Banned, Some(ban)) = (tripped, policy.red.ban) {
            log_at!(
                level,
                self.r.log(),
                "pow_shield: {prefix}client banned: client={client} key={kind} openings={} \
                 for={}s",
                ban.after,
                ban.ttl_ms.div_ceil(1000)
            );
        }
    }

    fn log_reject(&self, end: &End) {
        let policy = self.policy();
        let prefix = if policy.dry_run {
            "dry run, not enforced: "
        } else {
            ""
        };
        let what = match end.outcome {
            Outcome::Invalid => "solution rejected: ",
            _ => "",
        };
        let level: ngx_uint_t = policy.log_level;
        log_at!(
            level,
            self.r.log(),
            "pow_shield: {prefix}{what}{}",
            end.reason
        );
    }
}

/// A store's reply to one of the operations a request waits for.
enum Replied {
    /// The check's reply, and whether a refusal was an offence (a strike).
    Checked(Reply<Checked>, bool),
    Spent(Reply<Spent>),
    Struck(Reply<Standing>),
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

/// The first `X-PoW-Challenge` and `X-PoW-Nonce` request headers, in one
/// pass (every request of a shielded location looks for them).
fn pow_headers(r: &Request) -> (Option<&[u8]>, Option<&[u8]>) {
    let (mut token, mut nonce) = (None, None);
    for (key, value) in r.headers_in_iterator() {
        let key = key.as_bytes();
        if token.is_none() && key.eq_ignore_ascii_case(b"x-pow-challenge") {
            token = Some(value.as_bytes());
        } else if nonce.is_none() && key.eq_ignore_ascii_case(b"x-pow-nonce") {
            nonce = Some(value.as_bytes());
        }
    }
    (token, nonce)
}

/// `$remote_addr` (after realip): what challenges are bound to.
fn client_addr(r: &Request) -> String {
    // SAFETY: a request's connection is live while the request is.
    let c = unsafe { &*r.connection() };
    String::from_utf8_lossy(bytes(&c.addr_text)).into_owned()
}

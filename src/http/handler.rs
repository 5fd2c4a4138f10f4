//! The access-phase handler: the one request path. It finds the request's
//! state, lets the pure decision (`pow_shield_core::decision`) say what to
//! ask the stores, waits when Redis answers later (`NGX_AGAIN`; the store
//! posts the request's resume event and the phase runs again, as
//! `limit_req`'s delay does), then records the decision once, counts it,
//! logs it and responds.

use core::ptr::NonNull;

use nginx_sys::ngx_http_request_t;
use ngx::core::Status;
use ngx::http::{HttpModuleLocationConf, HttpModuleMainConf, Request};

use super::ahead::{binding, issue};
use super::counted::count_decided;
use super::key::{pooled, Pooled};
use super::request::{
    client_addr, client_key, key_values, pow_headers, trusted, values_of, Values,
};
use super::state::{RequestState, Resolution};
use super::straight::{self, Taken};
use super::{bot, log_lines, redirect, response};
use crate::config::{MainConf, Policy};
use crate::ffi::{now_ms, PowShield};
use crate::protocol::{self, Rejection};
use crate::store::{Spendable, Stores};
use pow_shield_bots::accept::invites;
use pow_shield_core::decision::redirect::after_redirect;
use pow_shield_core::decision::{green, Answer, Decision, Final, Next, Payment};
use pow_shield_core::limiter::MAX_LIMITS;
use pow_shield_core::store::{KeyValues, Reply, Solution, Subject};

/// Entry point from nginx's access phase.
pub extern "C" fn access_handler(r: *mut ngx_http_request_t) -> isize {
    crate::ffi::guard(Status::NGX_ERROR.0, || {
        // SAFETY: nginx passes a live request to phase handlers.
        let r = unsafe { Request::from_ngx_http_request(r) };
        decide(r).0
    })
}

/// The request path, top to bottom: state → next → ask → wait | finish →
/// record → metrics → log → respond.
fn decide(r: &mut Request) -> Status {
    // Subrequests are never counted; the main request was.
    if !r.is_main() {
        return Status::NGX_DECLINED;
    }
    let (Some(lcf), Some(mcf)) = (PowShield::location_conf(r), PowShield::main_conf(r)) else {
        return Status::NGX_DECLINED;
    };
    let policy = &lcf.policy;
    // Local mode's common request, in one pass (`http::straight`; a
    // location with one has a limit). Any other goes on in a function of
    // its own, so that a straight request saves and restores only the
    // registers the straight path uses.
    if let Some(straight) = policy.straight {
        return match straight::run(r, mcf, policy, straight) {
            Taken::Decided(status) => status,
            Taken::Left(key) => full(r, mcf, policy, key, None),
            Taken::Answered(key, reply) => full(r, mcf, policy, key, Some(reply)),
        };
    }
    // Unshielded locations cost nothing, even after an internal redirect
    // from a shielded one (that request was decided already).
    if policy.limits.is_empty() && !policy.trap {
        return Status::NGX_DECLINED;
    }
    full(r, mcf, policy, None, None)
}

/// The full path of a request of a shielded location under `policy`:
/// `made_key`, the client key if the straight path made it, and `checked`,
/// the zone's answer to its check if it asked.
#[inline(never)]
fn full(
    r: &mut Request,
    mcf: &MainConf,
    lcf_policy: &Policy,
    made_key: Option<Pooled>,
    checked: Option<Reply>,
) -> Status {
    // (`lcf_policy`: this location's; `policy` below is the one the state
    // decides under, after an internal redirect possibly the first
    // location's: `redirect::run_again` keeps a decision that holds.)
    // A request seen before goes on, or is decided again under this
    // location's policy, or keeps its answer (`decision::redirect`).
    let state = match RequestState::find(r) {
        Some(state) => match redirect::run_again(r, state, lcf_policy) {
            Ok(()) => state,
            Err(status) => return status,
        },
        None => match RequestState::attach(r, lcf_policy) {
            Some(state) => {
                // (Made by the straight path, which left the request here.)
                // SAFETY: just made in the request's pool; not borrowed.
                unsafe { (*state.as_ptr()).key = made_key };
                state
            }
            None => return Status::NGX_ERROR,
        },
    };
    // SAFETY: the state lives in the request's pool for the whole request.
    // Borrows of it are short: sending a response runs the header filter,
    // which reads the same state.
    let st = || unsafe { &mut *state.as_ptr() };
    let mut reply = st().take_reply();
    if reply.is_none() && st().waiting() {
        return Status::NGX_AGAIN;
    }
    let policy = st().policy();
    // The green check's answer, back: a request it admits quietly is
    // recorded as below, without its keys read again for steps it does not
    // take (those kept already: the first pass made them). Any other
    // reads the same answer below.
    if st().after_first && st().key.is_some() {
        let admitted = reply
            .as_ref()
            .and_then(|answer| green::admitted(&policy.rules, answer))
            .filter(|done| green::quiet(done, policy.log_summary_ms.is_some()));
        if let Some(done) = admitted {
            st().after_first = false;
            return passed(mcf, state, done);
        }
    }
    let stores = Stores::new(mcf, policy.fail);
    // (A signed request's signature after its anonymous client's breaker.)
    if bot::evaluate_keys(r, mcf, state, &stores).is_none() {
        return Status::NGX_ERROR;
    }
    let Some(key) = client_key(r, state) else {
        return Status::NGX_ERROR;
    };
    // A dry run counts under a key of its own: what it would block is
    // never enforced here or at any other location.
    let Some(store_key) = dry_run_key(r, policy, key) else {
        return Status::NGX_ERROR;
    };
    // As evaluated (none: no limit has a `key=`), for the log line that
    // names a refusing limit's value too. A location without `key=` (known
    // at configuration) has nothing to evaluate, nor a list to copy.
    let mut each: Values = [None; MAX_LIMITS];
    let evaluated = match policy.key_plan.is_empty() {
        true => None,
        false => match key_values(r, state, &mut each) {
            Some(()) => Some(&each),
            None => return Status::NGX_ERROR,
        },
    };
    let values = values_of(policy, evaluated);
    // Decided again after a redirect: a bucket that admitted the request
    // before does not count it twice. (A request's first decision never
    // counted before.) The values are made only where a limit has a `key=`
    // or counted before: the common location's request borrows the
    // location's limits and nothing more.
    let counted = match (evaluated, &st().earlier) {
        (None, None) => [false; MAX_LIMITS],
        _ => redirect::counted_before(st(), key, values),
    };
    let adjusted: Values;
    // (The common request's values are the location's, or those
    // evaluated when no dry run prefixes them: nothing of them is moved,
    // nor copied, to find that out.)
    let as_evaluated = evaluated.is_none() || !policy.dry_run;
    let counting = match as_evaluated && !counted.contains(&true) {
        true => values,
        false => {
            let mut each = evaluated.copied().unwrap_or([None; MAX_LIMITS]);
            for (value, counted) in each.iter_mut().zip(counted) {
                *value = match (*value, counted) {
                    (_, true) => Some(&[]),
                    (None, false) => None,
                    (Some(v), false) => match dry_run_key(r, policy, v) {
                        Some(dry) => Some(dry),
                        None => return Status::NGX_ERROR,
                    },
                };
            }
            adjusted = each;
            &adjusted[..policy.limits.len()]
        }
    };
    // (Only a request resumed after a store's answer has one kept: the
    // first pass does not move an empty one out of the state.)
    let kept = match (st().after_first, st().decision.is_some()) {
        (true, _) => {
            st().after_first = false;
            // The green check's answer arrived: a request it admits passes
            // as one answered at once does, without the decision's steps.
            let admitted = reply
                .as_ref()
                .and_then(|answer| green::admitted(&policy.rules, answer));
            if let Some(done) = admitted {
                return decided(r, mcf, &stores, state, done, values);
            }
            Some(Decision::after_first(&policy.rules, key.is_empty()))
        }
        (false, true) => st().decision.take(),
        (false, false) => None,
    };
    // (Made once the decision is: `payment` needs only the key.)
    let subject = subject(policy, store_key, counting);
    let mut decision = match kept {
        Some(decision) => decision,
        None => {
            let (mut paid, bits) = payment(r, mcf, &stores, store_key, key, policy);
            // Decided again after a redirect: the token may be the payment
            // of the policy before.
            if st().earlier.is_some() {
                paid = after_redirect(paid, st().paid_before);
            }
            st().paid_bits = bits;
            let (rules, exempt) = (&policy.rules, key.is_empty());
            // The green path (`decision::green`): the check asked at once,
            // and a request it admits passed without the decision's steps.
            match green::first(rules, paid, exempt) {
                None => Decision::of(rules, paid, exempt),
                // (The straight path's check answered already: the zone
                // was full, and room is not made twice.)
                Some(op) => {
                    let answer = match checked {
                        Some(answer) => Some(answer),
                        None => stores.ask(op, &subject, &mut || st().new_waiter()),
                    };
                    match answer {
                        Some(answer) => {
                            st().answered_now();
                            match green::admitted(rules, &answer) {
                                Some(done) => return decided(r, mcf, &stores, state, done, values),
                                None => {
                                    reply = Some(answer);
                                    Decision::after_first(rules, exempt)
                                }
                            }
                        }
                        None => {
                            // (Made again when the answer arrives: the
                            // same rules and key, nothing to keep.)
                            st().after_first = true;
                            return wait(r);
                        }
                    }
                }
            }
        }
    };
    let done = loop {
        match decision.next(reply.take(), || trusted(r, policy)) {
            Next::Ask(op) => match stores.ask(op, &subject, &mut || st().new_waiter()) {
                Some(answer) => {
                    st().answered_now();
                    reply = Some(answer);
                }
                None => {
                    st().decision = Some(decision);
                    return wait(r);
                }
            },
            Next::Done(done) => break done,
        }
    };
    decided(r, mcf, &stores, state, done, values)
}

/// The decision made: recorded once, counted, logged, answered. (Inline:
/// the green path's decision is made where it is recorded, not copied
/// into a call.)
#[inline(always)]
fn decided(
    r: &mut Request,
    mcf: &MainConf,
    stores: &Stores,
    state: NonNull<RequestState>,
    done: Final,
    values: KeyValues,
) -> Status {
    // SAFETY: as in `decide`: short borrows of the state in the request's
    // pool (logging and responding read it too).
    let st = || unsafe { &mut *state.as_ptr() };
    let policy = st().policy();
    let Some(key) = st().key.map(pooled) else {
        return Status::NGX_ERROR;
    };
    // A passed request that opened no breaker has nothing to log (nor a
    // response to make).
    if green::quiet(&done, policy.log_summary_ms.is_some()) {
        return passed(mcf, state, done);
    }
    st().decided = Some((done, now_ms()));
    count_decided(mcf, policy, || done);
    log_lines::log(r, policy, key, values, &done);
    respond(r, mcf, stores, state, policy, key, &done)
}

/// A decision that is all done once recorded (`green::quiet`): recorded,
/// counted, and the request passed on.
#[inline(always)]
fn passed(mcf: &MainConf, state: NonNull<RequestState>, done: Final) -> Status {
    // SAFETY: as in `decide`: the state lives in the request's pool; no
    // other borrow of it is live.
    let st = unsafe { &mut *state.as_ptr() };
    st.decided = Some((done, now_ms()));
    count_decided(mcf, st.policy(), || done);
    st.resolution = Resolution::Passed;
    Status::NGX_DECLINED
}

/// What the stores are asked about: the location's limits borrowed, not
/// copied.
fn subject<'a>(policy: &'a Policy, key: &'a [u8], key_values: KeyValues<'a>) -> Subject<'a> {
    Subject {
        key,
        limits: &policy.limits,
        key_values,
        rules: policy.breaker,
        rising: policy.difficulty.rises(),
    }
}

/// The solution the request carries, verified now: a refusal's strike is
/// then written in the check's round trip. Only consulted when the client
/// is over its limit.
/// `key` is the client's own, `store_key` the one the stores count it
/// under (a dry run's is another). With it, the bits a verified solution proved (`$pow_shield_bits`).
/// (Inline: most requests carry no solution, and are answered by the
/// header walk without a call or a copy of a payment.)
#[inline(always)]
fn payment(
    r: &Request,
    mcf: &MainConf,
    stores: &Stores,
    store_key: &[u8],
    key: &[u8],
    policy: &Policy,
) -> (Payment, Option<u8>) {
    if policy.limits.is_empty() || store_key.is_empty() {
        return (Payment::Unpaid, None);
    }
    let (token, proof) = pow_headers(r);
    if token.is_none() && proof.nonce.is_none() {
        return (Payment::Unpaid, None);
    }
    verified(r, mcf, stores, (store_key, key), policy, (token, proof))
}

/// [`payment`] of a request that carries a token or a nonce.
#[inline(never)]
fn verified(
    r: &Request,
    mcf: &MainConf,
    stores: &Stores,
    (store_key, key): (&[u8], &[u8]),
    policy: &Policy,
    (token, proof): (Option<&[u8]>, protocol::Proof<'_>),
) -> (Payment, Option<u8>) {
    let Some(keys) = mcf.keys.as_ref() else {
        return (Payment::Unpaid, None);
    };
    let expected = protocol::Expected {
        binding: binding(policy, key),
        max_bits: policy.difficulty.max,
    };
    // The cheap checks first; an Equi-X solution is verified last, and
    // before anything is written (docs/equix.md, "Verification cost").
    let verified = protocol::verify_paid(
        keys,
        token,
        proof,
        &client_addr(r),
        policy.difficulty.base,
        now_ms(),
        policy.challenge_ttl_ms,
        Some(&expected),
    );
    let solved = match verified {
        Ok(solved) => solved,
        // A challenge sent ahead by another location, for another key of
        // this address, or to the address the client had before (a
        // dual-stack or NAT-pool client), is no payment here and no
        // offence: the client paid ahead where it went before. Over the
        // limit it gets the 429 (whose strike paying takes back), as with
        // no solution.
        Err(Rejection::WrongPolicy | Rejection::WrongClient | Rejection::WrongIp)
            if token.is_some_and(protocol::sent_ahead) =>
        {
            return (Payment::Unpaid, None)
        }
        Err(rejection) => return (Payment::Invalid(rejection), None),
    };
    let solution = Solution {
        digest: solved.digest,
        spent_until_ms: solved.spent_until_ms(mcf.longest_challenge_ttl_ms),
        generation: solved.generation,
        forgive: solved.struck,
        retry_at_ms: solved.retry_at_ms,
    };
    let paid = match stores.accepts(solved.generation, store_key) {
        // Spendable now or not (elsewhere during an outage, a generation
        // being learnt: the store answers its spend with a fresh
        // challenge), it is no offence.
        Spendable::Now | Spendable::NotNow => Payment::Valid(solution),
        // Issued before a flush or a failover the worker knows of: an old
        // token sent again is no payment.
        Spendable::Stale => Payment::Unpaid,
    };
    (paid, Some(solved.bits))
}

/// The key the stores count the request under: the client key, or in a
/// dry run the same key marked as a dry run's (in the request pool), so
/// that a dry run's strikes and blocks stay its own.
fn dry_run_key<'r>(r: &'r Request, policy: &Policy, key: &'r [u8]) -> Option<&'r [u8]> {
    if !policy.dry_run || key.is_empty() {
        return Some(key);
    }
    // A prefix no address or header value starts with (the admin
    // location lifts a dry run's state under it too).
    super::key::pooled_concat(r, pow_shield_core::admin::DRY_RUN, key)
}

/// Waits for a store: a client that goes away meanwhile finalizes the
/// request (and the pool cleanup detaches the waiter); writes must not
/// re-run the phases.
fn wait(r: &mut Request) -> Status {
    let raw: &mut ngx_http_request_t = r.as_mut();
    raw.read_event_handler = Some(nginx_sys::ngx_http_test_reading);
    raw.write_event_handler = Some(nginx_sys::ngx_http_request_empty_handler);
    Status::NGX_AGAIN
}

/* responding */

fn respond(
    r: &mut Request,
    mcf: &MainConf,
    stores: &Stores,
    state: NonNull<RequestState>,
    policy: &Policy,
    key: &[u8],
    done: &Final,
) -> Status {
    let resolve = |resolution| {
        // SAFETY: as in `decide`; no other borrow is live here.
        unsafe { (*state.as_ptr()).resolution = resolution };
    };
    let Some(answer) = done.answer else {
        resolve(Resolution::Passed);
        return Status::NGX_DECLINED;
    };
    let status = match answer {
        Answer::Challenge { status, .. } | Answer::Error { status, .. } => status,
        Answer::Block(_) => policy.block_status,
        Answer::Unavailable => 503,
        Answer::NotFound => 404,
    };
    // nginx makes the trap's 404, and the operator's error_page for it
    // runs the phases again: that page is served, as for any missing page.
    resolve(match answer {
        Answer::NotFound => Resolution::Passed,
        _ => Resolution::Answered(status),
    });
    match answer {
        Answer::Challenge {
            status,
            error,
            bits,
        } => send_challenge(r, mcf, policy, key, done, (status, error, bits)),
        Answer::Error { status, message } => response::send_error(r, status, message),
        // nginx closes the connection for 444 (as `return 444` does).
        Answer::Block(_) if status == 444 => Status(444),
        Answer::Block(block) => {
            let ends_in_ms = done.breaker.map_or(0, |b| b.block_ms);
            response::send_blocked(r, status, block, ends_in_ms)
        }
        Answer::Unavailable => {
            let retry_after_ms = done
                .retry_after_ms
                .or_else(|| stores.retry_in_ms())
                .unwrap_or(1000);
            response::send_unavailable(r, retry_after_ms)
        }
        // nginx's own 404 (and the operator's error_page): a trap looks
        // like any missing page.
        Answer::NotFound => Status(404),
    }
}

/// The challenge response: `(status, error, bits)` of the answer.
fn send_challenge(
    r: &mut Request,
    mcf: &MainConf,
    policy: &Policy,
    key: &[u8],
    done: &Final,
    (status, error, bits): (u16, Option<&str>, u8),
) -> Status {
    // Paying a 429 takes back the strike it counted; a 409/410/422's
    // fresh challenge follows a strike that is never taken back.
    let struck = status == 429 && (done.struck || done.pays_back);
    let Some(challenge) = issue(r, mcf, policy, key, done, bits, struck) else {
        return Status::NGX_ERROR;
    };
    let retry_after_ms = done.verdict.map(|v| v.retry_after_ms);
    // A bot that could sign instead of paying is told how (docs/bots.md).
    let invite = invites(!mcf.bots.is_empty(), status, bot::signed(r));
    response::send_challenge(
        r,
        status,
        error,
        &challenge,
        policy,
        retry_after_ms.filter(|_| status == 429),
        invite,
    )
}

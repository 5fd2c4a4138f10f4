//! The straight path (`pow_shield_core::decision::straight`): local mode's
//! common request in one pass, as `limit_req` takes its own. The key is
//! made, the zone locked once, the client's window found or made and
//! counted, the zone unlocked, and the request declined: no request state,
//! decision, store reply or response is made for it, only a mark in its
//! pool ([`Passed`]) from which its state is made should anything ask (an
//! internal redirect, a variable). Any other request, and one the window
//! leaves to the full path, goes there with nothing counted.

use nginx_sys::{ngx_http_request_t, ngx_log_t, ngx_uint_t, NGX_LOG_DEBUG};
use ngx::core::Status;
use ngx::http::{HttpModule, Request};

use super::counted::count_decided;
use super::key::{default_key_text, evaluate_key, pooled, Pooled};
use super::request::carries_payment;
use super::state::{Passed, PassedKey};
use crate::config::{MainConf, Policy};
use crate::ffi::{bytes, PowShield};
use crate::store::{now, straight_admit, StraightKey};
use pow_shield_core::decision::straight::Straight;
use pow_shield_core::store::{NoRoom, Reply};
use pow_shield_core::syntax::HeadersMode;

/// What the straight path did with a request.
pub(super) enum Taken {
    /// Decided: the handler returns this.
    Decided(Status),
    /// The full path's, with the client key if it was made.
    Left(Option<Pooled>),
    /// The full path's, with the client key if it was made, and the
    /// zone's answer to its check (`Reply::Full`: room was made already).
    Answered(Option<Pooled>, Reply),
}

/// The request under `policy`, whose straight path is `straight`.
#[inline(always)]
pub(super) fn run(r: &mut Request, mcf: &MainConf, policy: &Policy, straight: Straight) -> Taken {
    // Local mode without Web Bot Auth (whose signature comes before the
    // key), and the request's first decision: no state nor mark yet.
    // (The zone directly, not `Stores`: the straight path is local mode's
    // by definition, and asks the zone what no store interface has, one
    // window counted in place.)
    let raw: &ngx_http_request_t = r.as_ref();
    let first = raw.internal() == 0
        // SAFETY: r->ctx has a slot per module.
        && unsafe { *raw.ctx.add(PowShield::module().ctx_index) }.is_null();
    let zone = match &mcf.resolved_zone {
        Some(zone) if first && mcf.redis().is_none() && mcf.bots.is_empty() => zone,
        _ => return Taken::Left(None),
    };
    // A solution or a token: the decision's (`handler::payment` asks the
    // same headers).
    if carries_payment(r) {
        return Taken::Left(None);
    }
    // The default key of an IPv4 peer is read where nginx keeps its
    // address text, not made (`key::default_key_text`); any other is made
    // in the pool as the full path makes it.
    let text = match policy.default_key {
        true => default_key_text(r),
        false => None,
    };
    // The mark's room before anything is counted: a request the pool
    // cannot mark is counted nowhere, and the full path answers it.
    let headers = policy.headers != HeadersMode::Off;
    let Some(room) = Passed::room(r, headers) else {
        return Taken::Left(None);
    };
    // (`counted`: the key as the mark keeps it; the address text counted,
    // not the connection's when the state is made: realip may rewrite it.)
    let counted;
    let key = match text {
        Some(text) => {
            counted = PassedKey::Address((text.as_ptr(), text.len()));
            StraightKey::Address(text)
        }
        None => {
            let Some(key) = evaluate_key(r, policy) else {
                return Taken::Decided(Status::NGX_ERROR);
            };
            // An exempt key (empty) is the decision's.
            if key.1 == 0 {
                return Taken::Left(Some(key));
            }
            counted = PassedKey::Made(key);
            StraightKey::Made(pooled(key))
        }
    };
    let now = now();
    let made = match counted {
        PassedKey::Made(key) => Some(key),
        PassedKey::Address(_) => None,
    };
    let verdict = match straight_admit(zone, straight, key, now) {
        Ok(Some(verdict)) => verdict,
        Ok(None) => return Taken::Left(made),
        // No room even after room was made: the full path answers the
        // check's reply as it is, without making room again.
        Err(NoRoom { retry_after_ms }) => {
            return Taken::Answered(made, Reply::Full { retry_after_ms })
        }
    };
    count_decided(mcf, policy, || Straight::decided(verdict));
    Passed::attach(r, room, policy, counted, verdict, now.epoch_ms);
    // What took the straight path, where the log asks for debug lines
    // (nginx sets that level without `--with-debug` too): one load and a
    // test at any other level.
    let log = r.log();
    // SAFETY: the request's connection log is live while the request is.
    if unsafe { (*log).log_level } >= NGX_LOG_DEBUG as ngx_uint_t {
        log_passed(r, log, verdict.remaining);
    }
    Taken::Decided(Status::NGX_DECLINED)
}

/// The debug line of a request the straight path passed (nginx adds no
/// request to a debug line: its URI is written here).
#[cold]
#[inline(never)]
fn log_passed(r: &Request, log: *mut ngx_log_t, remaining: u32) {
    let raw: &ngx_http_request_t = r.as_ref();
    let uri = String::from_utf8_lossy(bytes(&raw.uri));
    let line = format!("pow_shield: straight path: passed, remaining={remaining}, uri={uri}");
    // SAFETY: `log` is the live request's connection log; nginx copies the
    // bytes, passed as `%*s`, never as a format string.
    unsafe { ngx::log::log_error(NGX_LOG_DEBUG as ngx_uint_t, log, 0, line.as_bytes()) };
}

//! `pow_shield_admin` (docs/operations.md, "Seeing and lifting a block"):
//! the location's content is the operator's view of one key, `GET
//! ?key=<key>` (as a client: its breaker and counts; as a `key=` value:
//! its counts under the keyed limits; the node's zone and Redis's), and
//! `DELETE ?key=<key>` lifts it (`pow_shield_core::admin::Lift`), in the
//! zone and, in cluster mode, in Redis (every node learns it from there,
//! `store::redis::admin`). Access control is nginx's.
//!
//! In cluster mode the handler waits for Redis as the access handler
//! does: the calls go on the worker's connection, the answer goes to the
//! request state's `Waiter`, whose delivery posts the state's resume
//! event; the phases run again, and this handler, entered again, responds.
//! (A content handler that waits holds the request, `r->main->count`, and
//! returns `NGX_DONE`, as nginx's own do while they read a body.)

use core::cell::RefCell;
use std::rc::Rc;

use nginx_sys::{ngx_http_request_t, ngx_int_t, NGX_HTTP_DELETE, NGX_HTTP_GET, NGX_HTTP_HEAD};
use ngx::core::Status;
use ngx::http::{HttpModuleLocationConf, HttpModuleMainConf, Request};

use super::state::{Found, RequestState};
use crate::config::{LocConf, MainConf};
use crate::ffi::{bytes, PowShield};
use crate::store::admin::{zone_lift, zone_view};
use crate::store::{RedisStore, Waiter};
use pow_shield_core::admin::{self, Answers, FromRedis, KeyedLimit, Lift, Part};
use pow_shield_core::store::Counted;

const JSON: &str = "application/json";

/// The location's content handler.
pub extern "C" fn handler(r: *mut ngx_http_request_t) -> ngx_int_t {
    crate::ffi::guard(
        nginx_sys::NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t,
        || {
            // SAFETY: nginx passes a live request to content handlers.
            let r = unsafe { Request::from_ngx_http_request(r) };
            serve(r).0
        },
    )
}

/// The request, top to bottom: method → (back from Redis: respond) →
/// key → lift in the zone → ask Redis and wait | respond.
fn serve(r: &mut Request) -> Status {
    let raw: &ngx_http_request_t = r.as_ref();
    let lift = match raw.method as u32 {
        m if m & (NGX_HTTP_GET | NGX_HTTP_HEAD) != 0 => false,
        m if m & NGX_HTTP_DELETE != 0 => true,
        _ => {
            let body = admin::error_json("method not allowed: GET, HEAD or DELETE");
            return answer(r, 405, &body, &[("Allow", "GET, HEAD, DELETE")]);
        }
    };
    let (Some(mcf), Some(lcf)) = (PowShield::main_conf(r), PowShield::location_conf(r)) else {
        return Status(nginx_sys::NGX_HTTP_INTERNAL_SERVER_ERROR as isize);
    };
    if let Some(delivered) = delivered(r) {
        return match delivered {
            Some(redis) => respond(r, mcf, lcf, lift, &redis),
            // (Never expected: the phases run again only when delivered.)
            None => hold(r),
        };
    }
    let rc = r.discard_request_body();
    if rc != Status::NGX_OK {
        return rc;
    }
    let raw: &ngx_http_request_t = r.as_ref();
    let key = match admin::key_of_query(bytes(&raw.args)) {
        Ok(key) => key,
        Err(bad) => return answer(r, 400, &admin::error_json(bad.message()), &[]),
    };
    let keyed = &mcf.admin_keyed;
    let cleared = Lift::of(&key, keyed);
    if lift {
        zone_lift(mcf, &cleared, keyed);
    }
    let Some(redis) = crate::store::redis_store() else {
        return respond(r, mcf, lcf, lift, &FromRedis::None);
    };
    let state = match RequestState::find(r) {
        Some(state) => state,
        None => match RequestState::attach(r, &lcf.policy) {
            Some(state) => state,
            None => return Status::NGX_ERROR,
        },
    };
    // SAFETY: the state lives in the request's pool for the whole request;
    // no other borrow of it is live here.
    let waiter = unsafe { (*state.as_ptr()).new_admin_waiter() };
    match lift {
        true => ask_lift(&redis, mcf, &cleared, waiter),
        false => ask_view(&redis, mcf, &key, waiter),
    }
    hold(r)
}

/// Back from Redis: `Some` with the answer the waiter delivered (`None`
/// inside: still waiting); `None`: the request has not asked yet.
fn delivered(r: &Request) -> Option<Option<FromRedis>> {
    // (A request the straight path admitted has asked nothing.)
    let Found::State(state) = RequestState::found(r)? else {
        return None;
    };
    // SAFETY: as in `serve`: the request's state, one short borrow.
    let st = unsafe { &mut *state.as_ptr() };
    let answer = st.admin.as_ref()?.take();
    if answer.is_some() {
        st.admin = None;
    }
    Some(answer)
}

/// Holds the request until the resume event runs the phases again.
fn hold(r: &mut Request) -> Status {
    let raw: &mut ngx_http_request_t = r.as_mut();
    // SAFETY: the main request of a live request; `NGX_DONE` gives the
    // count back when the content phase finalizes it.
    unsafe { (*raw.main).set_count((*raw.main).count() + 1) };
    Status::NGX_DONE
}

/// The view's calls: the key as a client, and as a `key=` value when
/// limits count by one.
fn ask_view(redis: &RedisStore, mcf: &MainConf, key: &[u8], waiter: Rc<Waiter<FromRedis>>) {
    let keyed: Rc<[KeyedLimit]> = mcf.admin_keyed.as_slice().into();
    let answers = Rc::new(RefCell::new(Answers::view(!keyed.is_empty())));
    let (clients, _) = admin::store_keys(key);
    let mut calls = vec![(
        Part::Client,
        Counted::Client(&clients[0]),
        mcf.admin_limits.clone(),
    )];
    if !keyed.is_empty() {
        calls.push((Part::Keyed, Counted::Own(key), admin::counted_as(&keyed)));
    }
    for (part, whose, limits) in calls {
        let (held, waiter, keyed) = (answers.clone(), waiter.clone(), keyed.clone());
        let shown = move |view| {
            let done = held.borrow_mut().shown(part, view, &keyed);
            if let Some(done) = done {
                waiter.deliver(done);
            }
        };
        let failed = shown.clone();
        if redis.admin_show(whose, &limits, shown).is_err() {
            failed(None);
        }
    }
}

/// The lift's calls: one `DEL` per client reading and per value.
fn ask_lift(redis: &RedisStore, mcf: &MainConf, lift: &Lift, waiter: Rc<Waiter<FromRedis>>) {
    let answers = Rc::new(RefCell::new(Answers::lift(lift.calls())));
    let keyed = admin::counted_as(&mcf.admin_keyed);
    let breakers = lift
        .breakers
        .iter()
        .map(|k| (Counted::Client(k), &mcf.admin_limits));
    let values = lift.values.iter().map(|v| (Counted::Own(v), &keyed));
    for (whose, limits) in breakers.chain(values) {
        let (held, waiter) = (answers.clone(), waiter.clone());
        let lifted = move |ok| {
            let done = held.borrow_mut().lifted(ok);
            if let Some(done) = done {
                waiter.deliver(done);
            }
        };
        let failed = lifted.clone();
        if redis.admin_lift(whose, limits, lifted).is_err() {
            failed(false);
        }
    }
}

/// The answer: the lift's, or the view (the zone read now, Redis's as
/// delivered).
fn respond(
    r: &mut Request,
    mcf: &MainConf,
    lcf: &LocConf,
    lift: bool,
    redis: &FromRedis,
) -> Status {
    let raw: &ngx_http_request_t = r.as_ref();
    let key = match admin::key_of_query(bytes(&raw.args)) {
        Ok(key) => key,
        Err(bad) => return answer(r, 400, &admin::error_json(bad.message()), &[]),
    };
    let (clients, named) = admin::store_keys(&key);
    let keyed = &mcf.admin_keyed;
    if lift {
        let status = match redis {
            FromRedis::Unavailable => 503,
            _ => 200,
        };
        let body = admin::lifted_json(&key, named, !keyed.is_empty(), redis);
        return answer(r, status, &body, &[]);
    }
    let node = zone_view(mcf, (&clients[0], &key), &mcf.admin_limits, keyed);
    let body = admin::view_json(&key, named, lcf.policy.breaker, &node, redis);
    answer(r, 200, &body, &[])
}

fn answer(r: &mut Request, status: u16, body: &str, headers: &[(&str, &str)]) -> Status {
    match super::response::respond(r, status, JSON, body.as_bytes(), headers) {
        Ok(rc) | Err(rc) => rc,
    }
}

//! `pow_shield_admin` (docs/operations.md, "Seeing and lifting a block"):
//! the location's content is the operator's view of one client, `GET
//! ?key=<key>` (its breaker and counts, the node's zone and Redis's), and
//! `DELETE ?key=<key>` lifts its block and ban and clears its strikes, in
//! the zone and, in cluster mode, in Redis (every node learns it from
//! there, `store::redis::admin`). Access control is nginx's.
//!
//! In cluster mode the handler waits for Redis as the access handler does:
//! the calls go on the worker's connection, the request is held
//! (`r->main->count`), and the last answer posts an event that responds
//! and finalizes the request (never from inside the read callback).

use core::cell::{Cell, RefCell, UnsafeCell};
use std::rc::Rc;

use nginx_sys::{
    ngx_event_t, ngx_http_request_t, ngx_int_t, NGX_HTTP_DELETE, NGX_HTTP_GET, NGX_HTTP_HEAD,
};
use ngx::core::Status;
use ngx::http::{HttpModuleLocationConf, HttpModuleMainConf, Request};

use crate::config::MainConf;
use crate::ffi::{bytes, PowShield};
use crate::store::admin::{zone_lift, zone_view};
use pow_shield_core::admin::{self, FromRedis, Named};
use pow_shield_core::limiter::breaker::BreakerRules;

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
    let rc = r.discard_request_body();
    if rc != Status::NGX_OK {
        return rc;
    }
    let raw: &ngx_http_request_t = r.as_ref();
    let key = match admin::key_of_query(bytes(&raw.args)) {
        Ok(key) => key,
        Err(bad) => return answer(r, 400, &admin::error_json(bad.message()), &[]),
    };
    let (Some(mcf), Some(lcf)) = (PowShield::main_conf(r), PowShield::location_conf(r)) else {
        return Status(nginx_sys::NGX_HTTP_INTERNAL_SERVER_ERROR as isize);
    };
    let (keys, named) = admin::store_keys(&key);
    if lift {
        zone_lift(mcf, &keys);
    }
    let job = Job {
        r: (&mut *r).into(),
        event: UnsafeCell::new(zeroed_event()),
        left: Cell::new(0),
        redis: RefCell::new(FromRedis::None),
        gone: Cell::new(false),
        key,
        named,
        lift,
        rules: lcf.policy.breaker,
        mcf: mcf as *const MainConf,
    };
    let Some(redis) = crate::store::redis_store() else {
        return job.respond();
    };
    ask_redis(r, job, &redis, &keys)
}

/// A zeroed event: nginx's initial state of one.
fn zeroed_event() -> ngx_event_t {
    // SAFETY: an all-zero ngx_event_t is what nginx's own code starts from.
    unsafe { core::mem::zeroed() }
}

/// Sends the view's or the lift's calls and holds the request until the
/// last answer.
fn ask_redis(
    r: &mut Request,
    job: Job,
    redis: &crate::store::RedisStore,
    keys: &[Vec<u8>],
) -> Status {
    let calls = if job.lift { keys.len() } else { 1 };
    *job.redis.borrow_mut() = if job.lift {
        FromRedis::Lifted
    } else {
        FromRedis::Unavailable
    };
    job.left.set(calls);
    let job = Rc::new(job);
    // The request may be terminated while Redis answers (the client goes
    // away while its body is discarded, an HTTP/2 stream is reset): its
    // pool's cleanup tells the job, which then touches nothing of it.
    let raw: *mut ngx_http_request_t = (&mut *r).into();
    // SAFETY: adds a cleanup entry (no data of its own) to the live
    // request's pool; its data is a clone of the job, taken back once by
    // the handler.
    unsafe {
        let cln = nginx_sys::ngx_pool_cleanup_add((*raw).pool, 0);
        if cln.is_null() {
            return Status::NGX_ERROR;
        }
        (*cln).data = Rc::into_raw(job.clone()).cast_mut().cast();
        (*cln).handler = Some(request_gone);
    }
    // SAFETY: the event lives in the job, which the raw `data` keeps
    // alive until the event's handler takes it back; the request's
    // connection is live.
    unsafe {
        let ev = &mut *job.event.get();
        ev.handler = Some(job_done);
        ev.data = Rc::into_raw(job.clone()).cast_mut().cast();
        ev.log = (*r.connection()).log;
    }
    // Held until the job's event finalizes it.
    let raw: &mut ngx_http_request_t = r.as_mut();
    // SAFETY: the main request of a live request.
    unsafe { (*raw.main).set_count((*raw.main).count() + 1) };
    let limits = &job.mcf().admin_limits;
    if job.lift {
        for key in keys {
            let held = job.clone();
            let sent = redis.admin_lift(key, limits, move |ok| held.lifted(ok));
            if sent.is_err() {
                job.lifted(false);
            }
        }
    } else {
        let held = job.clone();
        let sent = redis.admin_show(&keys[0], limits, move |view| held.shown(view));
        if sent.is_err() {
            job.shown(None);
        }
    }
    Status::NGX_DONE
}

/// One admin request while Redis answers.
struct Job {
    r: *mut ngx_http_request_t,
    /// Posted when the last answer is in.
    event: UnsafeCell<ngx_event_t>,
    left: Cell<usize>,
    /// The request was freed before the answers came (its pool's cleanup
    /// ran): nothing of it may be touched.
    gone: Cell<bool>,
    redis: RefCell<FromRedis>,
    key: Vec<u8>,
    named: Named,
    lift: bool,
    /// The admin location's own `pow_shield_strikes` and `pow_shield_ban`:
    /// what "blocked" means in the view.
    rules: BreakerRules,
    /// The cycle's configuration (it outlives every request of the cycle).
    mcf: *const MainConf,
}

impl Job {
    fn mcf(&self) -> &MainConf {
        // SAFETY: the http main configuration lives as long as its cycle,
        // which outlives the requests it serves.
        unsafe { &*self.mcf }
    }

    fn shown(&self, view: Option<admin::StoreView>) {
        if let Some(view) = view {
            *self.redis.borrow_mut() = FromRedis::Answered(view);
        }
        self.one_less();
    }

    fn lifted(&self, ok: bool) {
        if !ok {
            *self.redis.borrow_mut() = FromRedis::Unavailable;
        }
        self.one_less();
    }

    fn one_less(&self) {
        let left = self.left.get().saturating_sub(1);
        self.left.set(left);
        if left == 0 {
            // SAFETY: the event is the job's, set up before any call was
            // sent; posting only queues it for this loop iteration.
            unsafe {
                nginx_sys::ngx_post_event(
                    self.event.get(),
                    core::ptr::addr_of_mut!(nginx_sys::ngx_posted_events),
                )
            };
        }
    }

    /// The answer: the lift's, or the view (read from the zone now).
    fn respond(&self) -> Status {
        // SAFETY: the request is live: local mode answers at once, cluster
        // mode holds it (`r->main->count`) until this runs.
        let r = unsafe { Request::from_ngx_http_request(self.r) };
        let redis = self.redis.borrow();
        let (keys, _) = admin::store_keys(&self.key);
        let (status, body) = if self.lift {
            let status = match *redis {
                FromRedis::Unavailable => 503,
                _ => 200,
            };
            (status, admin::lifted_json(&self.key, self.named, &redis))
        } else {
            let mcf = self.mcf();
            let node = zone_view(mcf, &keys[0], &mcf.admin_limits);
            let body = admin::view_json(&self.key, self.named, self.rules, &node, &redis);
            (200, body)
        };
        answer(r, status, &body, &[])
    }
}

/// The job's event: Redis answered every call.
unsafe extern "C" fn job_done(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: `data` is the job `ask_redis` leaked for this event; it is
        // taken back once, here, and the request it holds is live.
        unsafe {
            let job = Rc::from_raw((*ev).data.cast::<Job>().cast_const());
            if job.gone.get() {
                return;
            }
            let (r, c) = (job.r, (*job.r).connection);
            let rc = job.respond();
            nginx_sys::ngx_http_finalize_request(r, rc.0);
            nginx_sys::ngx_http_run_posted_requests(c);
            drop(job);
        }
    })
}

/// The request's pool cleanup: the request is freed (answered, or
/// terminated while Redis answered).
unsafe extern "C" fn request_gone(data: *mut core::ffi::c_void) {
    crate::ffi::guard((), || {
        // SAFETY: `data` is the job clone `ask_redis` leaked for this
        // cleanup, taken back once, here.
        let job = unsafe { Rc::from_raw(data.cast::<Job>().cast_const()) };
        job.gone.set(true);
    })
}

fn answer(r: &mut Request, status: u16, body: &str, headers: &[(&str, &str)]) -> Status {
    match super::response::respond(r, status, JSON, body.as_bytes(), headers) {
        Ok(rc) | Err(rc) => rc,
    }
}

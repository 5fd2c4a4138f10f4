//! `pow_shield_status` (docs/directives.md, docs/metrics.md): the location's content is
//! the metrics of every worker, summed from their slots in the shared zone,
//! in Prometheus text format. Access control is nginx's `allow`/`deny`.

use nginx_sys::{ngx_http_request_t, ngx_int_t, NGX_HTTP_GET, NGX_HTTP_HEAD};
use ngx::core::Status;
use ngx::http::{HttpModuleMainConf, Request};

use crate::config::MainConf;
use crate::ffi::PowShield;
use crate::shm::SharedZone;
use pow_shield_core::metrics::{self, Counts, Snapshot, CONTENT_TYPE};

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
    if raw.method & (NGX_HTTP_GET | NGX_HTTP_HEAD) as usize == 0 {
        return Status(nginx_sys::NGX_HTTP_NOT_ALLOWED as isize);
    }
    let rc = r.discard_request_body();
    if rc != Status::NGX_OK {
        return rc;
    }
    let Some(zone) = PowShield::main_conf(r).and_then(SharedZone::from_conf) else {
        return Status(nginx_sys::NGX_HTTP_INTERNAL_SERVER_ERROR as isize);
    };
    let mut body = metrics::render(&Snapshot {
        counts: Counts::sum(zone.metrics_slots()),
        zone: zone.stats(),
        version: env!("CARGO_PKG_VERSION"),
        limit_names: PowShield::main_conf(r).map_or_else(Vec::new, names_by_place),
    });
    if let Some(mcf) = PowShield::main_conf(r) {
        body += &zone.with_locked(|z, _| metrics::render_bots(mcf.bots.names(), &z.bots));
    }

    match super::response::respond(r, 200, CONTENT_TYPE, body.as_bytes(), &[]) {
        Ok(rc) | Err(rc) => rc,
    }
}

/// The configuration's limit names at their places in the slots.
fn names_by_place(mcf: &MainConf) -> Vec<String> {
    let mut names = vec![String::new(); metrics::LIMIT_NAMES];
    for (at, name) in mcf.limit_names.iter().enumerate() {
        let place = u8::try_from(at).ok().and_then(|at| mcf.limit_place(at));
        if let Some(slot) = place.and_then(|p| names.get_mut(usize::from(p))) {
            slot.clone_from(name);
        }
    }
    names
}

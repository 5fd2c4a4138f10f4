//! The request path: the access handler (`handler`), local mode's straight
//! path (`straight`), the client key (`key`), what the request says about
//! its client (`request`), the per-request state (`state`), the decision
//! counted in the metrics (`counted`), the
//! header filter that adds the rate-limit headers, the log lines of a
//! decision (`log_lines`), responses, `$pow_shield_*` variables, the
//! `pow_shield_status` location and the `pow_shield_admin` one.

pub mod admin;
mod ahead;
pub mod bot;
mod counted;
mod filter;
mod handler;
mod key;
pub mod log_lines;
mod redirect;
mod request;
mod response;
mod state;
pub mod status;
mod straight;
pub mod variables;

use nginx_sys::{
    ngx_array_push, ngx_conf_t, ngx_http_handler_pt, ngx_http_phases_NGX_HTTP_ACCESS_PHASE,
};
use ngx::core::Status;
use ngx::http::{HttpModuleMainConf, NgxHttpCoreModule};

/// `postconfiguration`: registers the access handler and the header filter.
pub fn install(cf: &mut ngx_conf_t) -> Status {
    let Some(cmcf) = NgxHttpCoreModule::main_conf_mut(cf) else {
        return Status::NGX_ERROR;
    };
    let phase = &mut cmcf.phases[ngx_http_phases_NGX_HTTP_ACCESS_PHASE as usize].handlers;
    // SAFETY: pushes one handler slot onto nginx's phase array.
    let h = unsafe { ngx_array_push(phase) }.cast::<ngx_http_handler_pt>();
    if h.is_null() {
        return Status::NGX_ERROR;
    }
    // SAFETY: `h` is a fresh slot in the array.
    unsafe { *h = Some(handler::access_handler) };
    filter::install();
    Status::NGX_OK
}

//! `nginx -t` warnings (not errors) for traps the docs describe, each
//! naming file and line, once per directive or location
//! (`pow_shield_core::config::traps` says what they say):
//! - a `pow_shield_key` that is one header variable alone: requests
//!   without the header are exempt;
//! - a shielded location whose first rewrite directive is `return`: the
//!   rewrite phase answers before the access phase, the shield never runs;
//! - `pow_shield_redis ... slot=net` where no limit counts per network.

use core::ffi::CStr;

use nginx_sys::{
    ngx_array_t, ngx_conf_t, ngx_flag_t, ngx_http_conf_ctx_t, ngx_uint_t, NGX_LOG_WARN,
};
use ngx::http::{HttpModuleLocationConf, NgxHttpCoreModule};
use pow_shield_core::config::traps;

use super::{ConfAt, LocConf, MainConf};
use crate::ffi::bytes;

/// Both warnings for a location being merged (`cf->ctx` is its context).
pub(super) fn warn_traps(cf: &ngx_conf_t, mcf: &mut MainConf, conf: &LocConf) {
    let policy = &conf.policy;
    if policy.limits.is_empty() && !policy.trap {
        return;
    }
    header_key(cf, mcf, conf);
    returns_first(cf, mcf, conf);
}

fn header_key(cf: &ngx_conf_t, mcf: &mut MainConf, conf: &LocConf) {
    let (Some(at), false) = (conf.key_at, conf.policy.default_key) else {
        return;
    };
    // SAFETY: a set key is a complex value compiled in the configuration
    // pool; its `value` is the text as written.
    let Some(cv) = (unsafe { conf.policy.key.as_ref() }) else {
        return;
    };
    let text = String::from_utf8_lossy(bytes(&cv.value));
    let Some(variable) = traps::lone_header_key(&text) else {
        return;
    };
    if once(mcf, at) {
        let message = traps::header_key_warning(variable, &at.to_string());
        log_at!(NGX_LOG_WARN, cf.log, "pow_shield: {message}");
    }
}

fn returns_first(cf: &ngx_conf_t, mcf: &mut MainConf, conf: &LocConf) {
    let (Some(at), Some(limit_at)) = (conf.created_at, conf.limit_at) else {
        return;
    };
    let Some(clcf) = NgxHttpCoreModule::location_conf(cf) else {
        return;
    };
    // An `if` block's codes are its location's: that one is warned of.
    if clcf.noname() != 0 || !first_code_returns(cf) || !once(mcf, at) {
        return;
    }
    let name = String::from_utf8_lossy(bytes(&clcf.name));
    let message = traps::return_warning(&name, &at.to_string(), &limit_at.to_string());
    log_at!(NGX_LOG_WARN, cf.log, "pow_shield: {message}");
}

/// `ngx_http_rewrite_loc_conf_t` (declared in its module's C file only; the
/// same in every nginx since 0.8).
#[repr(C)]
struct RewriteLocConf {
    codes: *mut ngx_array_t,
    stack_size: ngx_uint_t,
    log: ngx_flag_t,
    uninitialized_variable_warn: ngx_flag_t,
}

/// Whether the location's first rewrite code is `return` (an unconditional
/// one: an `if` comes first as its own code). The rewrite module, found by
/// name (nginx may be built without it), has merged already: modules merge
/// in order, and ours is loaded after nginx's own.
fn first_code_returns(cf: &ngx_conf_t) -> bool {
    // SAFETY: during configuration the cycle's module list is complete,
    // each entry a live module with a C-string name.
    let rewrite = unsafe {
        let cycle = &*cf.cycle;
        let modules = core::slice::from_raw_parts(cycle.modules, cycle.modules_n);
        modules.iter().copied().find(|m| {
            !m.is_null()
                && !(**m).name.is_null()
                && CStr::from_ptr((**m).name).to_bytes() == b"ngx_http_rewrite_module"
        })
    };
    let Some(rewrite) = rewrite else {
        return false;
    };
    // SAFETY: while a location is merged, cf->ctx is an http configuration
    // context whose loc_conf is that location's; the rewrite module's slot
    // is its RewriteLocConf, whose codes (when set) are a byte array of
    // pointer-sized codes.
    unsafe {
        let ctx = &*cf.ctx.cast::<ngx_http_conf_ctx_t>();
        let lcf = (*ctx.loc_conf.add((*rewrite).ctx_index)).cast::<RewriteLocConf>();
        let Some(codes) = lcf.as_ref().and_then(|l| l.codes.as_ref()) else {
            return false;
        };
        if codes.elts.is_null() || codes.nelts * codes.size < size_of::<usize>() {
            return false;
        }
        let first = codes.elts.cast::<usize>().read_unaligned();
        let ret: unsafe extern "C" fn(*mut nginx_sys::ngx_http_script_engine_t) =
            nginx_sys::ngx_http_script_return_code;
        first == ret as usize
    }
}

/// `slot=net` where no `pow_shield_limit` of the http block may count per
/// network (every line has been read: the http block is done).
pub(super) fn warn_slot_net(cf: &ngx_conf_t, mcf: &MainConf) {
    let Some(redis) = mcf.redis() else {
        return;
    };
    let at = redis.at.map(|at| at.to_string()).unwrap_or_default();
    let slot = redis.options.slot;
    if let Some(message) = traps::slot_net_warning(slot, mcf.per_network_key, &at) {
        log_at!(NGX_LOG_WARN, cf.log, "pow_shield: {message}");
    }
}

/// True the first time `at` is warned of.
fn once(mcf: &mut MainConf, at: ConfAt) -> bool {
    let key = at.key();
    if mcf.warned_at.contains(&key) {
        return false;
    }
    mcf.warned_at.push(key);
    true
}

//! Location-level setters (also valid in `http` and `server`, inherited
//! by merge): the pure reading of each directive's words is
//! `pow_shield_core::config::args`; here the result is stored, and what
//! the http level must know (something is shielded, a status location
//! exists) is noted in `MainConf`.
//!
//! `pow_shield_dry_run` and `pow_shield_pay_ahead` have no setter here:
//! nginx's own flag slot sets them
//! (the command table in src/lib.rs) and refuses in nginx's words for
//! every flag (`invalid value "maybe" in "pow_shield_dry_run" directive,
//! it must be "on" or "off"`: directive, value, file and line, as
//! t/pow_shield_config.t asks). The log levels and
//! `pow_shield_challenge_ttl` keep ours: nginx's enum slot refuses with
//! `invalid value "loud"` without the directive's name, and its msec slot
//! with `"pow_shield_challenge_ttl" directive invalid value` without the
//! value, and t/pow_shield_config.t pins both.

use core::ffi::{c_char, c_void};

use nginx_sys::{ngx_command_t, ngx_conf_t, ngx_http_handler_pt};
use ngx::http::{HttpModuleLocationConf, HttpModuleMainConf, NgxHttpCoreModule};
use pow_shield_core::config::{args, traps};
use pow_shield_core::limiter::KeyId;
use pow_shield_core::metrics::LIMIT_NAMES;

use super::setters::{
    compile_complex_value, run_setter, set_once, setter, Directive, DirectiveError,
};
use super::{ConfAt, LocConf};
use crate::ffi::PowShield;

/// Strikes and limits need the zone (and Redis, in cluster mode).
fn note_shielded(cf: &mut ngx_conf_t) {
    if let Some(mcf) = PowShield::main_conf_mut(cf) {
        mcf.shielded = true;
    }
}

// Several lines in one context stack (`args::stack_limit`); the names of
// named or stacked limits are the metrics' `limit` label values, noted
// (at most `LIMIT_NAMES`) as each line is read so a refusal names it.
setter!(set_limit, LocConf, |d, lcf| {
    let limit = args::limit(&d.args)?;
    if limit.is_some() {
        note_shielded(d.cf);
        lcf.limit_at = lcf.limit_at.or(ConfAt::of(d.cf));
    }
    args::stack_limit(&mut lcf.settings.limit, limit, &d.args)?;
    let Some(Some(limits)) = lcf.settings.limit else {
        return Ok(());
    };
    // Each `key=` text compiled once, however many limits count per it.
    if let Some(key) = limit.and_then(|line| line.key) {
        if let Some(mcf) = PowShield::main_conf_mut(d.cf) {
            mcf.per_network_key |= traps::may_count_per_network(key);
        }
        let id = KeyId::of(key);
        if lcf.settings.key_sources.get(id).is_none() {
            let cv = compile_complex_value(d.cf, key)?;
            if !lcf.settings.key_sources.add(id, cv) {
                return Err(DirectiveError::invalid(key, "too many \"key=\" values"));
            }
        }
    }
    let Some(mcf) = PowShield::main_conf_mut(d.cf) else {
        return Err(DirectiveError::Logged);
    };
    if limits.is_plain() {
        return Ok(());
    }
    for i in 0..limits.len() {
        let name = limits.name(i).to_string();
        if mcf.limit_names.contains(&name) {
            continue;
        }
        if mcf.limit_names.len() >= LIMIT_NAMES {
            return Err(DirectiveError::invalid(
                d.args
                    .iter()
                    .find(|a| a.starts_with("name="))
                    .copied()
                    .unwrap_or(args::first(&d.args)),
                format_args!(
                    "more than {LIMIT_NAMES} limit names in the configuration \
                     (the metrics' \"limit\" label)"
                ),
            ));
        }
        mcf.limit_names.push(name);
    }
    Ok(())
});

setter!(set_difficulty, LocConf, |d, lcf| {
    set_once(&mut lcf.settings.difficulty, args::difficulty(&d.args)?)
});

// Where strikes and ban are written is kept for the merge's warning of a
// ban that strikes off leaves without effect (`Settings::warning`).
setter!(set_strikes, LocConf, |d, lcf| {
    set_once(&mut lcf.settings.strikes, args::strikes(&d.args)?)?;
    lcf.strikes_at = ConfAt::of(d.cf);
    Ok(())
});

setter!(set_ban, LocConf, |d, lcf| {
    set_once(&mut lcf.settings.ban, args::ban(&d.args)?)?;
    lcf.ban_at = ConfAt::of(d.cf);
    Ok(())
});

setter!(set_block_status, LocConf, |d, lcf| {
    set_once(
        &mut lcf.settings.block_status,
        args::block_status(d.value())?,
    )
});

setter!(set_trap, LocConf, |d, lcf| {
    note_shielded(d.cf);
    lcf.limit_at = lcf.limit_at.or(ConfAt::of(d.cf));
    set_once(&mut lcf.settings.trap, true)
});

/// `pow_shield_status`: the location's content is `handler`, the metrics
/// (as `stub_status` does). src/lib.rs wires the status handler in, so
/// configuration needs nothing of the request path.
///
/// # Safety
/// `cf`, `cmd` and `conf` are what nginx passes to a setter of a command
/// whose `conf` offset is `NGX_HTTP_LOC_CONF_OFFSET`.
pub unsafe fn set_status(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
    handler: ngx_http_handler_pt,
) -> *mut c_char {
    // SAFETY: the caller passes what nginx passed (see the contract).
    unsafe {
        run_setter(cf, cmd, conf, |d: &mut Directive, lcf: &mut LocConf| {
            if lcf.settings.status {
                return Err(DirectiveError::Duplicate);
            }
            lcf.settings.status = true;
            // Counting starts in every worker once a status location exists.
            if let Some(mcf) = PowShield::main_conf_mut(d.cf) {
                mcf.status = true;
            }
            serve_with(d, handler)
        })
    }
}

/// Makes `handler` the location's content (a status or admin location).
fn serve_with(d: &mut Directive, handler: ngx_http_handler_pt) -> Result<(), DirectiveError> {
    let Some(clcf) = NgxHttpCoreModule::location_conf_mut(d.cf) else {
        return Err(DirectiveError::Logged);
    };
    clcf.handler = handler;
    Ok(())
}

/// `pow_shield_admin`: the location's content is `handler`, the view and
/// lift of one client. Like a status location, it is never shielded
/// (`Settings::status` keeps it out of every limit and trap it inherits).
///
/// # Safety
/// As [`set_status`].
pub unsafe fn set_admin(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
    handler: ngx_http_handler_pt,
) -> *mut c_char {
    // SAFETY: the caller passes what nginx passed (see the contract).
    unsafe {
        run_setter(cf, cmd, conf, |d: &mut Directive, lcf: &mut LocConf| {
            if lcf.admin {
                return Err(DirectiveError::Duplicate);
            }
            lcf.admin = true;
            lcf.settings.status = true;
            serve_with(d, handler)
        })
    }
}

setter!(set_key, LocConf, |d, lcf| {
    if lcf.settings.key.is_some() {
        return Err(DirectiveError::Duplicate);
    }
    let cv = compile_complex_value(d.cf, d.value())?;
    lcf.key_at = ConfAt::of(d.cf);
    set_once(&mut lcf.settings.key, cv)
});

setter!(set_challenge_ttl, LocConf, |d, lcf| {
    set_once(
        &mut lcf.settings.challenge_ttl_ms,
        args::challenge_ttl(d.value())?,
    )
});

setter!(set_headers, LocConf, |d, lcf| {
    set_once(&mut lcf.settings.headers, args::headers(d.value())?)
});

setter!(set_work, LocConf, |d, lcf| {
    set_once(&mut lcf.settings.work, args::work(d.value())?)
});

setter!(set_log_level, LocConf, |d, lcf| {
    set_once(&mut lcf.settings.log_level, args::log_level(d.value())?)
});

setter!(set_log_summary, LocConf, |d, lcf| {
    set_once(&mut lcf.settings.log_summary, args::log_summary(d.value())?)
});

setter!(set_breaker_log_level, LocConf, |d, lcf| {
    set_once(
        &mut lcf.settings.breaker_log_level,
        args::log_level(d.value())?,
    )
});

setter!(set_fail, LocConf, |d, lcf| {
    if lcf.settings.fail.is_some() {
        return Err(DirectiveError::Duplicate);
    }
    let (policy, trusted) = args::fail(&d.args)?;
    let trusted = match trusted {
        Some(value) => Some(compile_complex_value(d.cf, value)?),
        None => None,
    };
    set_once(&mut lcf.settings.fail, (policy, trusted))
});

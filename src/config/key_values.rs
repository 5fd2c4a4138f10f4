//! A request's `key=` value that is a variable's name as text (a `geo`
//! block's `default $pow_shield_net;`): `nginx -t` cannot see a `geo`
//! value, a request can. `pow_shield_core::config::limit_key` decides what
//! the value does (the request is left out of that limit); here the
//! value is applied, and each worker warns once per limit.

use core::cell::RefCell;

use nginx_sys::{ngx_http_complex_value_t, NGX_LOG_WARN};
use ngx::http::Request;
use pow_shield_core::config::limit_key::{self, KeyValue};
use pow_shield_core::limiter::key_plan::KeyFrom;

use super::Policy;

/// The most limits a worker remembers warning of; beyond them, it warns
/// of no more (one line each is the point, not a line per request).
const WARNED_MAX: usize = 64;

thread_local! {
    /// The `key=` texts (their compiled values) this worker has warned of.
    static WARNED: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// `value`, the request's value of the `key=` text compiled as `cv`, as
/// its limit counts it: empty (left out) where it is a variable's name
/// (`is_client_address`: whether it is the client's own address, asked
/// only of a value shaped like one).
/// (Inline: asked of every value of a `key=` text evaluated by nginx; a
/// value that does not start with `$` is decided at its first byte.)
#[inline(always)]
pub(crate) fn counted<'v>(
    r: &Request,
    policy: &Policy,
    cv: &ngx_http_complex_value_t,
    value: &'v [u8],
    is_client_address: impl FnOnce() -> bool,
) -> &'v [u8] {
    match limit_key::key_value(value, is_client_address) {
        KeyValue::Counted | KeyValue::LeftOut => value,
        KeyValue::VariableName => {
            warn_once(r, policy, cv, value);
            value.get(..0).unwrap_or_default()
        }
    }
}

#[cold]
fn warn_once(r: &Request, policy: &Policy, cv: &ngx_http_complex_value_t, value: &[u8]) {
    let first = WARNED.with_borrow_mut(|warned| {
        let id = core::ptr::from_ref(cv) as usize;
        let first = !warned.contains(&id) && warned.len() < WARNED_MAX;
        if first {
            warned.push(id);
        }
        first
    });
    if !first {
        return;
    }
    // The first limit that counts per this text names it (a later one of
    // the same text shares its value).
    let place = policy.key_plan.steps().find_map(|step| match step.from {
        KeyFrom::Source(source) if core::ptr::eq(source, cv) => Some(usize::from(step.place)),
        _ => None,
    });
    let Some(place) = place else {
        return;
    };
    let name = policy.limits.name(place);
    let message = limit_key::variable_name_warning(name.as_str(), value);
    log_at!(NGX_LOG_WARN, r.log(), "pow_shield: {message}");
}

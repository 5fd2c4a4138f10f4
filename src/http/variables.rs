//! `$pow_shield_result`, `$pow_shield_remaining`, `$pow_shield_difficulty`,
//! `$pow_shield_bits` and `$pow_shield_strikes` for `log_format` (docs/directives.md, "Embedded Variables"). They read the main request's state, so they
//! work in subrequests and after internal redirects too.
//!
//! `$pow_shield_client` is the client identity of the default key (IPv6 by
//! /64, see `limiter::client`), `$pow_shield_net` its network (/24, /48);
//! they need no shield state and work anywhere.

use nginx_sys::{
    ngx_conf_t, ngx_http_add_variable, ngx_http_request_t, ngx_http_variable_t, ngx_int_t,
    ngx_str_t, ngx_variable_value_t, NGX_HTTP_VAR_NOCACHEABLE, NGX_OK,
};
use ngx::core::Status;
use ngx::http::Request;
use ngx::ngx_string;

use super::key::peer_ip;
use super::state::RequestState;
use pow_shield_core::limiter::client::{client_id, client_net, ClientId};

const RESULT: usize = 0;
const REMAINING: usize = 1;
const DIFFICULTY: usize = 2;
const STRIKES: usize = 3;
const BITS: usize = 4;

/// `preconfiguration`: declares the variables.
pub fn register(cf: &mut ngx_conf_t) -> Status {
    let vars: [(ngx_str_t, usize); 5] = [
        (ngx_string!("pow_shield_result"), RESULT),
        (ngx_string!("pow_shield_remaining"), REMAINING),
        (ngx_string!("pow_shield_difficulty"), DIFFICULTY),
        (ngx_string!("pow_shield_strikes"), STRIKES),
        (ngx_string!("pow_shield_bits"), BITS),
    ];
    for (mut name, which) in vars {
        // SAFETY: cf is the configuration being parsed; the name is static.
        let var: *mut ngx_http_variable_t =
            unsafe { ngx_http_add_variable(cf, &mut name, NGX_HTTP_VAR_NOCACHEABLE as _) };
        if var.is_null() {
            return Status::NGX_ERROR;
        }
        // SAFETY: nginx returned a valid variable slot.
        unsafe {
            (*var).get_handler = Some(get);
            (*var).data = which;
        }
    }
    type Getter = unsafe extern "C" fn(
        *mut ngx_http_request_t,
        *mut ngx_variable_value_t,
        usize,
    ) -> ngx_int_t;
    let addresses: [(ngx_str_t, Getter); 2] = [
        (ngx_string!("pow_shield_client"), get_client),
        (ngx_string!("pow_shield_net"), get_net),
    ];
    for (mut name, get) in addresses {
        // SAFETY: as above. Not cacheable: realip may still change the
        // address after an early read (its location-level handler runs in
        // preaccess).
        let var = unsafe { ngx_http_add_variable(cf, &mut name, NGX_HTTP_VAR_NOCACHEABLE as _) };
        if var.is_null() {
            return Status::NGX_ERROR;
        }
        // SAFETY: nginx returned a valid variable slot.
        unsafe { (*var).get_handler = Some(get) };
    }
    Status::NGX_OK
}

/// `$pow_shield_net`: the client's /24 or /48 (`limiter::client::client_net`).
unsafe extern "C" fn get_net(
    r: *mut ngx_http_request_t,
    v: *mut ngx_variable_value_t,
    _data: usize,
) -> ngx_int_t {
    // SAFETY: nginx's arguments, passed on as they came.
    unsafe { of_peer(r, v, client_net) }
}

/// `$pow_shield_client`: the client as one address counts it
/// (`limiter::client::client_id`: IPv6 by /64).
unsafe extern "C" fn get_client(
    r: *mut ngx_http_request_t,
    v: *mut ngx_variable_value_t,
    _data: usize,
) -> ngx_int_t {
    // SAFETY: nginx's arguments, passed on as they came.
    unsafe { of_peer(r, v, client_id) }
}

/// A variable made of the client's address by `of`.
///
/// # Safety
/// `r` is a live request and `v` its variable's value slot, as nginx passes
/// them to a variable's handler.
unsafe fn of_peer(
    r: *mut ngx_http_request_t,
    v: *mut ngx_variable_value_t,
    of: fn(Option<std::net::IpAddr>) -> ClientId,
) -> ngx_int_t {
    crate::ffi::guard(nginx_sys::NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx passes a live request, with its connection, and a
        // value slot to fill.
        let (r, v) = unsafe { (&*r, &mut *v) };
        // SAFETY: the connection outlives its requests.
        let value = of(unsafe { peer_ip(&*r.connection) });
        set_value(v, r.pool, value.as_str())
    })
}

unsafe extern "C" fn get(
    r: *mut ngx_http_request_t,
    v: *mut ngx_variable_value_t,
    which: usize,
) -> ngx_int_t {
    crate::ffi::guard(nginx_sys::NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx passes a live request and a value slot to fill.
        let (r, v) = unsafe { (Request::from_ngx_http_request((*r).main), &mut *v) };
        // SAFETY: the state lives in the main request's pool; read briefly.
        let text = RequestState::find(r)
            .map(|s| unsafe { s.as_ref() })
            .and_then(|state| match which {
                RESULT => state.outcome().map(|o| o.as_str().to_owned()),
                REMAINING => state.verdict().map(|v| v.remaining.to_string()),
                // The price asked of this client, else the location's: in
                // hex digits (⌈bits / 4⌉, as X-PoW-Difficulty) or bits.
                DIFFICULTY | BITS => {
                    let bits = state.bits().unwrap_or(state.policy().difficulty.base);
                    let value = if which == BITS {
                        bits
                    } else {
                        bits.div_ceil(4)
                    };
                    Some(value.to_string())
                }
                STRIKES => state.status().map(|s| s.strikes.to_string()),
                _ => None,
            });
        let Some(text) = text else {
            v.set_not_found(1);
            return NGX_OK as ngx_int_t;
        };
        set_value(v, r.as_ref().pool, &text)
    })
}

/// Fills `v` with a copy of `text` in the request's `pool`.
fn set_value(
    v: &mut ngx_variable_value_t,
    pool: *mut nginx_sys::ngx_pool_t,
    text: &str,
) -> ngx_int_t {
    // SAFETY: copies the text into the request pool, which outlives the value.
    let Some(s) = (unsafe { ngx_str_t::from_bytes(pool, text.as_bytes()) }) else {
        return nginx_sys::NGX_ERROR as ngx_int_t;
    };
    set_found(v, s, false);
    NGX_OK as ngx_int_t
}

/// Makes `v` the value `s` (`cacheable`: nginx may keep it for the
/// request), its length and flags written in one store, as the C modules'
/// bit-field assignments compile (measured: bindgen's setters write a bit at
/// a time, some 480 instructions for the 28 bits of `len`). `escape` is
/// kept, as the setters kept it.
pub(super) fn set_found(v: &mut ngx_variable_value_t, s: ngx_str_t, cacheable: bool) {
    v.data = s.data;
    // `len:28; valid:1; no_cacheable:1; not_found:1; escape:1`: on a
    // little-endian machine bindgen numbers bit `i` as the C compiler
    // does, bit `i` of the unit read as a little-endian `u32`.
    #[cfg(target_endian = "little")]
    {
        const LEN: u32 = (1 << 28) - 1;
        const VALID: u32 = 1 << 28;
        const NO_CACHEABLE: u32 = 1 << 29;
        const ESCAPE: u32 = 1 << 31;
        let bits = (s.len as u32 & LEN)
            | VALID
            | if cacheable { 0 } else { NO_CACHEABLE }
            | if v.escape() != 0 { ESCAPE } else { 0 };
        v._bitfield_1 = nginx_sys::__BindgenBitfieldUnit::new(bits.to_le_bytes());
    }
    #[cfg(not(target_endian = "little"))]
    {
        v.set_len(s.len as u32);
        v.set_valid(1);
        v.set_no_cacheable(u32::from(!cacheable));
        v.set_not_found(0);
    }
    debug_assert!(v.len() == s.len as u32 & ((1 << 28) - 1) && v.valid() == 1);
    debug_assert!(v.no_cacheable() == u32::from(!cacheable));
}

//! The header filter: every response of a shielded request (proxied, static,
//! error pages, our own 4xx) carries the rate-limit headers, and a passed
//! one the next challenge when its decision sends one ahead.

use core::ptr;

use nginx_sys::{
    ngx_http_output_header_filter_pt, ngx_http_request_t, ngx_int_t, ngx_list_part_t,
    ngx_table_elt_t, NGX_ERROR,
};
use ngx::http::Request;

use crate::ffi::bytes;

use super::ahead::{add_next_challenge, is_next_header};
use super::response::{
    add_passed_rate_limit_headers, add_rate_limit_headers, is_rate_limit_header,
};
use super::state::{Found, RequestState};

/// The next header filter in nginx's chain.
static mut NEXT: ngx_http_output_header_filter_pt = None;

/// Puts our filter at the top of the chain (during postconfiguration).
pub fn install() {
    // SAFETY: configuration runs single-threaded in the master; the chain
    // pointers are only written here.
    unsafe {
        NEXT = nginx_sys::ngx_http_top_header_filter;
        nginx_sys::ngx_http_top_header_filter = Some(header_filter);
    }
}

unsafe extern "C" fn header_filter(r: *mut ngx_http_request_t) -> ngx_int_t {
    let ok = crate::ffi::guard(false, || {
        // SAFETY: nginx passes a live request to header filters.
        let r = unsafe { Request::from_ngx_http_request(r) };
        if !r.is_main() {
            return true;
        }
        let mut state = match RequestState::found(r) {
            None => return true,
            Some(Found::State(state)) => state,
            // The straight path's decisions send nothing ahead
            // (`decision::straight`): the rate-limit headers of its verdict
            // alone, once.
            Some(Found::Passed(passed)) => {
                // SAFETY: in the request's pool; nothing else borrows it.
                let mark = unsafe { &mut *passed.as_ptr() };
                if mark.headers_sent && !cleared(r) {
                    return true;
                }
                mark.headers_sent = true;
                return add_passed_rate_limit_headers(r, passed).is_some();
            }
        };
        // SAFETY: the state lives in the request's pool; nothing else holds
        // a borrow of it while a header filter runs (the handler keeps only
        // a pointer across sending).
        let state = unsafe { state.as_mut() };
        if state.headers_sent {
            if !cleared(r) {
                return true;
            }
            // Only the list nginx cleared pointed at the values: they are
            // made again, of the request's decision (the same one, unless
            // an error_page had it decided again in another location).
            state.header_values = None;
        }
        state.headers_sent = true;
        add_rate_limit_headers(r, state).is_some() && add_next_challenge(r, state).is_some()
    });
    if !ok {
        return NGX_ERROR as ngx_int_t;
    }
    // SAFETY: NEXT was set at configuration time to the previous top filter.
    match unsafe { ptr::addr_of!(NEXT).read() } {
        Some(next) => unsafe { next(r) },
        None => NGX_ERROR as ngx_int_t,
    }
}

/// Whether the response our headers went into was dropped since, its
/// header list cleared: a header filter answered the request instead
/// (`ngx_http_filter_finalize_request`: the not_modified filter's 412,
/// image_filter's 415, xslt's errors), and the new response, sent through
/// the filters again, carries none of ours. (A response sent again whole,
/// as a range filter's 416 or its error_page is, still carries them: that
/// run adds nothing. Nor does one run after the headers were added again.)
#[cold]
#[inline(never)]
fn cleared(r: &Request) -> bool {
    let raw: &ngx_http_request_t = r.as_ref();
    raw.filter_finalize() != 0
        && !carries_header(r, |name| is_rate_limit_header(name) || is_next_header(name))
}

/// Whether a header of the response of `r` is one `ours` names, its list
/// walked as nginx keeps it (part by part).
fn carries_header(r: &Request, ours: impl Fn(&[u8]) -> bool) -> bool {
    let raw: &ngx_http_request_t = r.as_ref();
    let mut part: *const ngx_list_part_t = &raw.headers_out.headers.part;
    // SAFETY: the response's header list is nginx's: each part holds
    // `nelts` headers at `elts`, the parts are linked until a null `next`,
    // and all of it lives in the request's pool, as long as `r`.
    while let Some(p) = unsafe { part.as_ref() } {
        let headers: &[ngx_table_elt_t] = match p.nelts {
            0 => &[],
            // SAFETY: as above.
            n => unsafe { core::slice::from_raw_parts(p.elts.cast(), n) },
        };
        if headers.iter().any(|h| ours(bytes(&h.key))) {
            return true;
        }
        part = p.next;
    }
    false
}

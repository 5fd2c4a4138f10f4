//! The header filter: every response of a shielded request (proxied, static,
//! error pages, our own 4xx) carries the rate-limit headers, and a passed
//! one the next challenge when its decision sends one ahead.

use core::ptr;

use nginx_sys::{ngx_http_output_header_filter_pt, ngx_http_request_t, ngx_int_t, NGX_ERROR};
use ngx::http::Request;

use super::ahead::add_next_challenge;
use super::response::{add_passed_rate_limit_headers, add_rate_limit_headers};
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
                if mark.headers_sent {
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
            return true;
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

//! The headers the shield adds to a response: the rate-limit headers of a
//! request's verdict (docs/protocol.md §2), and any header of a static
//! name, each list element written whole.

use core::mem::size_of;
use core::ptr::{self, NonNull};

use nginx_sys::{ngx_http_request_t, ngx_list_t, ngx_str_t, ngx_table_elt_t};
use ngx::http::Request;

use crate::config::Policy;
use crate::ffi::bytes;
use crate::http::state::{Passed, RequestState};
use pow_shield_core::headers::{rate_limit_item, HeaderValues, RateLimitNumbers, Value};
use pow_shield_core::limiter::Verdict;
use pow_shield_core::syntax::HeadersMode;

/// Adds the rate-limit headers (docs/protocol.md §2) for the request's verdict. This
/// runs for every shielded response: fixed texts were made at configuration
/// time; the numbers are written by hand into one buffer, which the state
/// keeps (in the request's pool) and the headers point into.
pub fn add_rate_limit_headers(r: &mut Request, state: &mut RequestState) -> Option<()> {
    let policy = state.policy();
    // (`pow_shield_headers off`: nothing read. Values written already:
    // headers point into them, so they are never written over.)
    if policy.headers == HeadersMode::Off || state.header_values.is_some() {
        return Some(());
    }
    let Some((verdict, decided_at_ms)) = state
        .decided
        .as_ref()
        .and_then(|(done, at)| Some((done.verdict?, *at)))
    else {
        return Some(());
    };
    let slot = &mut state.header_values;
    push_rate_limit_headers(r, policy, &verdict, decided_at_ms, |v| slot.insert(v))
}

/// Whether `name` is one of the rate-limit headers' (those
/// `push_rate_limit_headers` sends), in any case.
pub fn is_rate_limit_header(name: &[u8]) -> bool {
    [
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
        "RateLimit-Policy",
        "RateLimit",
    ]
    .iter()
    .any(|ours| name.eq_ignore_ascii_case(ours.as_bytes()))
}

/// [`add_rate_limit_headers`] of a request the straight path admitted
/// (`http::straight`), whose mark is `passed`: the same headers, of its
/// verdict, their values kept after its mark (it has no state). (Inline: a
/// location with the headers off asks nothing more.)
#[inline(always)]
pub fn add_passed_rate_limit_headers(r: &mut Request, passed: NonNull<Passed>) -> Option<()> {
    // SAFETY: a live mark in the request's pool; nothing else borrows it.
    let (policy, _, _) = unsafe { passed.as_ref() }.decided();
    match policy.headers {
        HeadersMode::Off => Some(()),
        _ => add_marked_rate_limit_headers(r, passed),
    }
}

/// [`add_passed_rate_limit_headers`] of a location that sends them.
#[inline(never)]
fn add_marked_rate_limit_headers(r: &mut Request, passed: NonNull<Passed>) -> Option<()> {
    // SAFETY: as in `add_passed_rate_limit_headers`.
    let (policy, verdict, decided_at_ms) = unsafe { passed.as_ref() }.decided();
    let verdict = *verdict;
    // SAFETY: a live mark; the values are written once (the filter adds a
    // request's headers once), or again the same once nginx cleared the
    // list that pointed at them (`filter::cleared`). (The room is taken with the mark where the
    // location sends the headers, `http::straight`: a mark without it
    // sends none.)
    let Some(slot) = (unsafe { Passed::header_values(passed) }) else {
        return Some(());
    };
    push_rate_limit_headers(r, policy, &verdict, decided_at_ms, |v| slot.write(v))
}

/// The rate-limit headers of `verdict`, made at `decided_at_ms` under
/// `policy`, whose values are written where `keep` puts them, in the
/// request's pool (the headers point there).
#[inline(always)]
fn push_rate_limit_headers<'v>(
    r: &mut Request,
    policy: &Policy,
    verdict: &Verdict,
    decided_at_ms: u64,
    keep: impl FnOnce(HeaderValues) -> &'v mut HeaderValues,
) -> Option<()> {
    let x = matches!(policy.headers, HeadersMode::X | HeadersMode::Both);
    let ietf = matches!(policy.headers, HeadersMode::Ietf | HeadersMode::Both);
    let numbers = RateLimitNumbers::new(verdict, decided_at_ms);
    // The limit the verdict is of: the tightest, or the one that refused.
    let at = usize::from(verdict.limit);
    let Some(limit) = policy.limits.get(at) else {
        return Some(()); // no limit here (a trap): no rate-limit headers
    };
    // `X-RateLimit-Limit` and the start of `RateLimit` as made at
    // configuration time.
    let fixed = policy.x_limits.get(at).copied().filter(|s| s.len > 0);
    let requests = fixed.is_none().then_some(limit.requests);
    // (Made now only where configuration made none. One call makes the
    // values, in place: not made in one of two places and moved.)
    let made;
    let item = match policy.rate_limit_items.get(at).map(bytes) {
        Some(item) if !item.is_empty() => item,
        _ => {
            made = rate_limit_item(&policy.limits, at);
            made.as_bytes()
        }
    };
    // Written where they are kept, once a response (the header filter
    // adds the headers once): not made aside and copied there.
    let values = keep(HeaderValues::EMPTY);
    values.write(requests, item, &numbers, (x, ietf));
    let values = &*values;
    let text = values.as_bytes().as_ptr();
    let value = |v: Value| {
        let (start, len) = values.span(v);
        ngx_str_t {
            len,
            // SAFETY: `span` lies within the values' bytes, which live in
            // the request's pool (its state, or the straight path's mark)
            // and are written once (above); nginx's modules only read a
            // header's value.
            data: unsafe { text.add(start) }.cast_mut(),
        }
    };
    // Five headers (or three, or two) in a row of the list's last part,
    // reserved at once rather than pushed one call at a time.
    let mut room = HeaderRoom::reserve(r, 3 * usize::from(x) + 2 * usize::from(ietf));
    if x {
        room.push(
            "X-RateLimit-Limit",
            "x-ratelimit-limit",
            fixed.unwrap_or_else(|| value(Value::Limit)),
        )?;
        room.push(
            "X-RateLimit-Remaining",
            "x-ratelimit-remaining",
            value(Value::Remaining),
        )?;
        room.push(
            "X-RateLimit-Reset",
            "x-ratelimit-reset",
            value(Value::Reset),
        )?;
    }
    if ietf {
        room.push("RateLimit-Policy", "ratelimit-policy", policy.ietf_policy)?;
        room.push("RateLimit", "ratelimit", value(Value::RateLimit))?;
    }
    Some(())
}

/// Room for a few output headers of a request: elements of the header
/// list's last part, taken together when it has room for them all (as
/// `ngx_list_push` would hand them out one by one), else pushed one at a
/// time.
struct HeaderRoom {
    list: *mut ngx_list_t,
    /// The next reserved element, and how many are left.
    next: *mut ngx_table_elt_t,
    left: usize,
}

impl HeaderRoom {
    /// Room for `n` headers of `r`, each filled by [`HeaderRoom::push`]
    /// (any left unfilled is skipped by nginx: see `Drop`).
    #[inline(always)]
    fn reserve(r: &mut Request, n: usize) -> HeaderRoom {
        let raw: *mut ngx_http_request_t = r.into();
        // SAFETY: the live request's output header list, made by nginx
        // (`ngx_list_init` of `ngx_table_elt_t`s): its last part holds
        // `nelts` of `nalloc` elements, those after `nelts` unused; taking
        // `n` of them is what `n` calls of `ngx_list_push` would do.
        unsafe {
            let list = ptr::addr_of_mut!((*raw).headers_out.headers);
            let last = (*list).last;
            let used = (*last).nelts;
            let fits = (*list).size == size_of::<ngx_table_elt_t>()
                && used.checked_add(n).is_some_and(|end| end <= (*list).nalloc);
            if !fits {
                return HeaderRoom {
                    list,
                    next: ptr::null_mut(),
                    left: 0,
                };
            }
            (*last).nelts = used + n;
            HeaderRoom {
                list,
                next: (*last).elts.cast::<ngx_table_elt_t>().add(used),
                left: n,
            }
        }
    }

    /// Fills the next reserved element (or a pushed one) with a header
    /// whose name is static; the value is in memory that lives as long as
    /// the request.
    #[inline(always)]
    fn push(&mut self, name: &'static str, lowcase: &'static str, value: ngx_str_t) -> Option<()> {
        let h = match self.left {
            0 => {
                // SAFETY: the live request's output header list.
                let h = unsafe { nginx_sys::ngx_list_push(self.list) };
                NonNull::new(h.cast::<ngx_table_elt_t>())?.as_ptr()
            }
            _ => {
                let h = self.next;
                // SAFETY: within the elements reserved (`left` more).
                self.next = unsafe { h.add(1) };
                self.left -= 1;
                h
            }
        };
        // SAFETY: an element of the list, ours to fill (whole).
        unsafe { fill_header(h, name, lowcase, value) };
        Some(())
    }
}

impl Drop for HeaderRoom {
    /// Elements reserved and never filled (a push left out) are written
    /// empty: all zero, `hash` 0, which nginx's filters and variables skip
    /// as a removed header (no pointer or length left as the pool had it).
    fn drop(&mut self) {
        while self.left > 0 {
            // SAFETY: a reserved element of the list (`left` more); all
            // zero is a valid `ngx_table_elt_t` (null pointers, no bytes).
            unsafe {
                ptr::write_bytes(self.next, 0, 1);
                self.next = self.next.add(1);
            }
            self.left -= 1;
        }
    }
}

/// Writes a header element whole: static name and lower-case name, the
/// value, and every other field zero (`next`, where nginx has it: 1.23
/// and later; Debian's 1.22 has none).
///
/// # Safety
/// `h` is a writable element of a request's output header list.
#[inline(always)]
unsafe fn fill_header(
    h: *mut ngx_table_elt_t,
    name: &'static str,
    lowcase: &'static str,
    value: ngx_str_t,
) {
    // SAFETY: all zero is a valid `ngx_table_elt_t` (null pointers, no
    // bytes); `h` is writable per the contract.
    unsafe {
        let mut elt: ngx_table_elt_t = core::mem::zeroed();
        elt.hash = 1;
        elt.key = ngx_str_t {
            len: name.len(),
            data: name.as_ptr().cast_mut(),
        };
        elt.value = value;
        elt.lowcase_key = lowcase.as_ptr().cast_mut();
        h.write(elt);
    }
}

/// Appends an output header whose name is static; the value is in memory
/// that lives as long as the request (its pool, or the configuration's).
pub(in crate::http) fn push_header(
    r: &mut Request,
    name: &'static str,
    lowcase: &'static str,
    value: ngx_str_t,
) -> Option<()> {
    let raw: *mut ngx_http_request_t = r.into();
    // SAFETY: pushes onto the live request's output header list, and
    // fills the new element whole.
    unsafe {
        let h = nginx_sys::ngx_list_push(&mut (*raw).headers_out.headers).cast::<ngx_table_elt_t>();
        if h.is_null() {
            return None;
        }
        fill_header(h, name, lowcase, value);
    }
    Some(())
}

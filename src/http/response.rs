//! Every response the shield writes: JSON bodies (RFC 9457 problem details,
//! docs/protocol.md §7) and headers.

use core::mem::size_of;
use core::ptr::{self, NonNull};

use nginx_sys::{
    ngx_buf_t, ngx_chain_t, ngx_http_request_t, ngx_list_t, ngx_str_t, ngx_table_elt_t,
};
use ngx::core::{Buffer, Status};
use ngx::http::Request;

use super::state::{Passed, RequestState};
use crate::config::Policy;
use crate::ffi::bytes;
use crate::protocol::wire::{self, ChallengeJson, ErrorBody, Problem};
use crate::protocol::{Challenge, Work};
use pow_shield_bots::accept;
use pow_shield_core::headers::{rate_limit_item, HeaderValues, RateLimitNumbers, Value};
use pow_shield_core::limiter::breaker::Block;
use pow_shield_core::limiter::Verdict;
use pow_shield_core::syntax::HeadersMode;

const STATUS_422: &str = "422 Unprocessable Content";

/// `Retry-After` seconds: whole seconds, at least 1 (RFC 9110 delay-seconds).
pub fn retry_after_secs(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

/// Sends a challenge: 429 (`error` is None) or a verification failure that
/// comes with a fresh challenge (409, 410, 422). The body advertises the
/// location's strike threshold; `invite`: the response asks for a Web Bot
/// Auth signature (`Accept-Signature`, docs/bots.md).
///
/// The body is written once, into the buffer that goes out
/// ([`ChallengeJson`]); `X-PoW-Challenge` points at the token inside it and
/// the numbers' headers at their digits after it: nothing is formatted
/// twice, nothing allocated but that one pool buffer.
pub fn send_challenge(
    r: &mut Request,
    status: u16,
    error: Option<&str>,
    challenge: &Challenge,
    policy: &Policy,
    retry_after_ms: Option<u64>,
    invite: bool,
) -> Status {
    let body = ChallengeJson {
        problem: Problem::of(error.unwrap_or(wire::CHALLENGE_MESSAGE)),
        token: &challenge.token,
        salt: &challenge.salt,
        difficulty: challenge.difficulty,
        bits: challenge.bits,
        work: challenge.work,
        expires_in: policy.challenge_ttl_ms / 1000,
        strike_threshold: policy.breaker.strikes.map(|s| s.threshold),
    };
    let json = json_type(r);
    // A body that can't be read (e.g. broken chunking) gets nginx's answer.
    let rc = r.discard_request_body();
    if rc != Status::NGX_OK {
        return rc;
    }
    // Written once on the stack (a body is about 1 kB), then copied into
    // the buffer that goes out; a longer one is measured first.
    let mut stack = [0u8; 2048];
    let written = body.write_with_token(&mut stack);
    let (len, token_at) = match written {
        Some(done) => done,
        None => (body.len(), body.token_offset()),
    };
    // The body, then the decimal digits of the headers' numbers.
    let mut digits = Digits {
        bytes: [0; 60],
        len: 0,
    };
    let difficulty = digits.push(u64::from(challenge.difficulty));
    let bits = digits.push(u64::from(challenge.bits));
    let retry = retry_after_ms.map(|ms| digits.push(retry_after_secs(ms)));
    let filled = last_buffer(r, len, digits.len, |out| {
        let (text, numbers) = out.split_at_mut(len);
        numbers.copy_from_slice(&digits.bytes[..digits.len]);
        match (written, stack.get(..len)) {
            (Some(_), Some(made)) => {
                text.copy_from_slice(made);
                true
            }
            _ => body.write_to(text).is_some(),
        }
    });
    let Some(b) = filled else {
        return Status::NGX_ERROR;
    };
    // SAFETY: the buffer `last_buffer` filled; it lives in the request's
    // pool, as long as the headers that point into it.
    let data = unsafe { (*b).pos };
    let at = |(start, n): (usize, usize)| ngx_str_t {
        len: n,
        // SAFETY: within the buffer's `len + digits.len` bytes (above).
        data: unsafe { data.add(start) },
    };
    let number = |(start, n): (usize, usize)| at((len + start, n));
    let fixed = |v: &'static str| ngx_str_t {
        len: v.len(),
        data: v.as_ptr().cast_mut(),
    };
    let mut headers: [Option<Header>; 6] = [
        Some((
            wire::HEADER_CHALLENGE,
            "x-pow-challenge",
            at((token_at, challenge.token.len())),
        )),
        Some((
            wire::HEADER_DIFFICULTY,
            "x-pow-difficulty",
            number(difficulty),
        )),
        Some((wire::HEADER_BITS, "x-pow-bits", number(bits))),
        // Only Equi-X says so: a SHA-256 challenge is as it always was.
        (challenge.work != Work::Sha256).then(|| {
            (
                wire::HEADER_ALGORITHM,
                "x-pow-algorithm",
                fixed(challenge.work.name()),
            )
        }),
        retry.map(|secs| ("Retry-After", "retry-after", number(secs))),
        None,
    ];
    if invite {
        headers[5] = Some((
            accept::HEADER,
            "accept-signature",
            fixed(accept::INVITATION),
        ));
    }
    let raw: *mut ngx_http_request_t = (&mut *r).into();
    // SAFETY: a plain field of the live request (as in `send`).
    unsafe { (*raw).err_status = 0 };
    let push = |r: &mut Request| {
        headers
            .iter()
            .flatten()
            .try_for_each(|&(name, lowcase, value)| push_header(r, name, lowcase, value))
    };
    match respond_with(r, status, json, len, push, |r| send_buffer(r, b)) {
        Ok(rc) => finalize(raw, rc),
        Err(rc) => rc,
    }
}

/// A header whose name is static: name, lower-case name, and a value in
/// memory that lives as long as the request.
type Header = (&'static str, &'static str, ngx_str_t);

/// Decimal numbers side by side (a challenge's three at most), each as
/// (start, length).
struct Digits {
    bytes: [u8; 60],
    len: usize,
}

impl Digits {
    fn push(&mut self, n: u64) -> (usize, usize) {
        let start = self.len;
        wire::decimal(n, |digits| {
            if let Some(dst) = self.bytes.get_mut(start..start + digits.len()) {
                dst.copy_from_slice(digits);
                self.len += digits.len();
            }
        });
        (start, self.len - start)
    }
}

/// Sends the problem details of `message` with `status`.
pub fn send_error(r: &mut Request, status: u16, message: &str) -> Status {
    let json = json_type(r);
    send(r, status, json, ErrorBody::json(message).as_bytes(), &[])
}

/// `application/problem+json` for a client whose `Accept` asks for it,
/// else `application/json` (docs/protocol.md §7).
fn json_type(r: &Request) -> &'static str {
    wire::media_type(
        r.headers_in_iterator()
            .filter(|(k, _)| k.as_bytes().eq_ignore_ascii_case(b"accept"))
            .map(|(_, v)| v.as_bytes()),
    )
}

/// The circuit breaker's answer (docs/protocol.md §7.4): as cheap as a response gets,
/// plain text, no challenge.
pub fn send_blocked(r: &mut Request, status: u16, block: Block, ends_in_ms: u64) -> Status {
    let shield = match block {
        Block::Banned => wire::SHIELD_BANNED,
        Block::Blocked | Block::Clear => wire::SHIELD_BLOCKED,
    };
    // Seconds until the block or ban ends (at least 1).
    let secs = retry_after_secs(ends_in_ms).to_string();
    send(
        r,
        status,
        "text/plain",
        wire::BLOCKED_BODY.as_bytes(),
        &[(wire::HEADER_SHIELD, shield), ("Retry-After", &secs)],
    )
}

/// 503 while the store is down under `pow_shield_fail closed`, or when a
/// solution cannot be recorded.
pub fn send_unavailable(r: &mut Request, retry_after_ms: u64) -> Status {
    let secs = retry_after_secs(retry_after_ms).to_string();
    let json = json_type(r);
    send(
        r,
        wire::UNAVAILABLE_STATUS,
        json,
        ErrorBody::json(wire::UNAVAILABLE_MESSAGE).as_bytes(),
        &[("Retry-After", &secs)],
    )
}

/// Writes a whole response from the access phase and finalizes the request.
/// Returns `NGX_DONE` (the phase loop must stop) or `NGX_ERROR`.
fn send(
    r: &mut Request,
    status: u16,
    content_type: &'static str,
    body: &[u8],
    headers: &[(&str, &str)],
) -> Status {
    // A body that can't be read (e.g. broken chunking) gets nginx's answer.
    let rc = r.discard_request_body();
    if rc != Status::NGX_OK {
        return rc;
    }
    let raw: *mut ngx_http_request_t = (&mut *r).into();
    // The shield's answer keeps its status where an error page brought the
    // request too (nginx sends `err_status` instead when it is set).
    // SAFETY: a plain field of the live request.
    unsafe { (*raw).err_status = 0 };
    match respond(r, status, content_type, body, headers) {
        Ok(rc) => finalize(raw, rc),
        Err(rc) => rc,
    }
}

/// Sends the status, headers (with `Cache-Control: no-store`) and `body`:
/// `Ok` with nginx's answer once the header went out (the caller finalizes
/// or returns it), `Err` when nothing could be sent.
pub(super) fn respond(
    r: &mut Request,
    status: u16,
    content_type: &'static str,
    body: &[u8],
    headers: &[(&str, &str)],
) -> Result<Status, Status> {
    let more = |r: &mut Request| {
        headers
            .iter()
            .try_for_each(|(name, value)| r.add_header_out(name, value))
    };
    respond_with(r, status, content_type, body.len(), more, |r| {
        let copied = last_buffer(r, body.len(), 0, |out| {
            out.copy_from_slice(body);
            true
        });
        copied.map_or(Status::NGX_ERROR, |b| send_buffer(r, b))
    })
}

/// The response's last buffer, in the request's pool: `len` bytes that go
/// out and `spare` bytes after them that do not, all filled by `fill`
/// (false: nothing to send). `None` without memory or when `fill` failed.
fn last_buffer(
    r: &Request,
    len: usize,
    spare: usize,
    fill: impl FnOnce(&mut [u8]) -> bool,
) -> Option<*mut ngx_buf_t> {
    let mut buf = r.pool().create_buffer(len + spare)?;
    let b = buf.as_ngx_buf_mut();
    // SAFETY: a fresh temporary buffer of `len + spare` bytes at `pos`,
    // ours until it is sent.
    let out = unsafe {
        (*b).last = (*b).pos.add(len);
        (*b).set_last_buf(1);
        (*b).set_last_in_chain(1);
        core::slice::from_raw_parts_mut((*b).pos, len + spare)
    };
    fill(out).then_some(b)
}

/// Sends the body's one buffer down the output filters.
fn send_buffer(r: &mut Request, b: *mut ngx_buf_t) -> Status {
    let mut out = ngx_chain_t {
        buf: b,
        next: core::ptr::null_mut(),
    };
    r.output_filter(&mut out)
}

/// [`respond`] with the headers `headers` adds (after `Cache-Control`)
/// and a body of `len` bytes that `body` sends once the header went out.
fn respond_with(
    r: &mut Request,
    status: u16,
    content_type: &'static str,
    len: usize,
    headers: impl FnOnce(&mut Request) -> Option<()>,
    body: impl FnOnce(&mut Request) -> Status,
) -> Result<Status, Status> {
    let raw: *mut ngx_http_request_t = (&mut *r).into();
    // SAFETY: the request is live; these are plain fields of headers_out,
    // and the content type is a static string.
    unsafe {
        (*raw).headers_out.status = usize::from(status);
        if status == 422 {
            // nginx knows no reason phrase for 422 (RFC 9110 names it).
            (*raw).headers_out.status_line = ngx_str_t {
                len: STATUS_422.len(),
                data: STATUS_422.as_ptr().cast_mut(),
            };
        }
        (*raw).headers_out.content_type = ngx_str_t {
            len: content_type.len(),
            data: content_type.as_ptr().cast_mut(),
        };
        (*raw).headers_out.content_type_len = content_type.len();
        (*raw).headers_out.content_type_lowcase = core::ptr::null_mut();
    }
    r.set_content_length_n(len);
    // Per client and per moment (RFC 6585: challenges must not be cached;
    // a scrape is a fresh reading).
    let no_store = ngx_str_t {
        len: NO_STORE.len(),
        data: NO_STORE.as_ptr().cast_mut(),
    };
    push_header(r, "Cache-Control", "cache-control", no_store).ok_or(Status::NGX_ERROR)?;
    headers(r).ok_or(Status::NGX_ERROR)?;
    let rc = r.send_header();
    if rc == Status::NGX_ERROR || rc.0 > Status::NGX_OK.0 || r.header_only() {
        return Ok(rc);
    }
    Ok(body(r))
}

const NO_STORE: &str = "no-store";

fn finalize(r: *mut ngx_http_request_t, rc: Status) -> Status {
    // SAFETY: the request is live; after this call it may be freed, and we
    // return NGX_DONE so the phase engine does not touch it again.
    unsafe { nginx_sys::ngx_http_finalize_request(r, rc.0) };
    Status::NGX_DONE
}

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
    // SAFETY: the mark's location sends the headers, so its room was
    // taken with theirs (`Passed::room`, in `http::straight`); they are
    // written once (the filter adds a request's headers once).
    let slot = unsafe { Passed::header_values(passed) };
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
    /// Elements reserved and never filled (a push left out) are marked
    /// for nginx to skip (`hash` 0), as a removed header is: the list
    /// never holds an element unwritten.
    fn drop(&mut self) {
        while self.left > 0 {
            // SAFETY: a reserved element of the list (`left` more).
            unsafe {
                (*self.next).hash = 0;
                self.next = self.next.add(1);
            }
            self.left -= 1;
        }
    }
}

/// Writes a header element whole: static name and lower-case name, the
/// value, no next.
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
    // SAFETY: per the contract.
    unsafe {
        h.write(ngx_table_elt_t {
            hash: 1,
            key: ngx_str_t {
                len: name.len(),
                data: name.as_ptr().cast_mut(),
            },
            value,
            lowcase_key: lowcase.as_ptr().cast_mut(),
            next: ptr::null_mut(),
        })
    };
}

/// Appends an output header whose name is static; the value is in memory
/// that lives as long as the request (its pool, or the configuration's).
pub(super) fn push_header(
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

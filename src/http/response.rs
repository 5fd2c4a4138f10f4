//! Every response the shield writes: JSON bodies (RFC 9457 problem details,
//! docs/protocol.md §7) and headers.

use nginx_sys::{ngx_buf_t, ngx_chain_t, ngx_http_request_t, ngx_str_t};
use ngx::core::{Buffer, Status};
use ngx::http::Request;

use crate::config::Policy;
use crate::protocol::wire::{self, ChallengeJson, ErrorBody, Problem};
use crate::protocol::{Challenge, Work};
use pow_shield_bots::accept;
use pow_shield_core::limiter::breaker::Block;

mod headers;
pub(super) use headers::push_header;
pub use headers::{add_passed_rate_limit_headers, add_rate_limit_headers, is_rate_limit_header};

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

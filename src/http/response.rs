//! Every response the shield writes: JSON bodies (SPEC §4) and headers.

use nginx_sys::{ngx_chain_t, ngx_http_request_t, ngx_str_t};
use ngx::core::{Buffer, Status};
use ngx::http::Request;
use serde_json::json;

use super::state::Shield;
use crate::config::values::HeadersMode;
use crate::pow::Challenge;

const JSON: &str = "application/json";

/// `Retry-After` seconds: whole seconds, at least 1 (RFC 9110 delay-seconds).
pub fn retry_after_secs(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

/// Sends a challenge: 429 (`error` is None) or a verification failure that
/// comes with a fresh challenge (409, 410, 422).
pub fn send_challenge(
    r: &mut Request,
    status: u16,
    error: Option<&str>,
    challenge: &Challenge,
    ttl_ms: u64,
    retry_after_ms: Option<u64>,
) -> Status {
    let body = json!({
        "error": error.unwrap_or("PoW challenge required"),
        "challenge": challenge.token,
        "difficulty": challenge.difficulty,
        "salt": challenge.salt,
        "algorithm": "sha256",
        "expires_in": ttl_ms / 1000,
        "instructions": instructions(challenge.difficulty),
    });
    let difficulty = challenge.difficulty.to_string();
    let mut headers = vec![
        ("X-PoW-Challenge", challenge.token.as_str()),
        ("X-PoW-Difficulty", difficulty.as_str()),
    ];
    let retry_after = retry_after_ms.map(|ms| retry_after_secs(ms).to_string());
    if let Some(secs) = retry_after.as_deref() {
        headers.push(("Retry-After", secs));
    }
    send(r, status, JSON, body.to_string().as_bytes(), &headers)
}

fn instructions(difficulty: u8) -> String {
    format!(
        "Find a decimal nonce such that the lower-case hex SHA-256 of salt followed by nonce \
         starts with {difficulty} '0' characters, then repeat the request with the headers \
         X-PoW-Challenge: <challenge> and X-PoW-Nonce: <nonce>. Each solution admits one request."
    )
}

/// Sends `{"error": message}` with `status`.
pub fn send_error(r: &mut Request, status: u16, message: &str) -> Status {
    let body = json!({ "error": message });
    send(r, status, JSON, body.to_string().as_bytes(), &[])
}

/// 503 while the store is down under `pow_shield_fail closed`.
pub fn send_unavailable(r: &mut Request, retry_after_ms: u64) -> Status {
    let body = json!({ "error": "Rate limiter unavailable" });
    let secs = retry_after_secs(retry_after_ms).to_string();
    send(
        r,
        503,
        JSON,
        body.to_string().as_bytes(),
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
    if r.discard_request_body() != Status::NGX_OK {
        return Status::NGX_ERROR;
    }
    let raw: *mut ngx_http_request_t = (&mut *r).into();
    // SAFETY: the request is live; these are plain fields of headers_out.
    unsafe {
        (*raw).headers_out.status = usize::from(status);
        (*raw).headers_out.content_type = ngx_str_t {
            len: content_type.len(),
            data: content_type.as_ptr().cast_mut(),
        };
        (*raw).headers_out.content_type_len = content_type.len();
        (*raw).headers_out.content_type_lowcase = core::ptr::null_mut();
    }
    r.set_content_length_n(body.len());
    // Challenges are per client and per moment (RFC 6585: must not be cached).
    if r.add_header_out("Cache-Control", "no-store").is_none() {
        return Status::NGX_ERROR;
    }
    for (name, value) in headers {
        if r.add_header_out(name, value).is_none() {
            return Status::NGX_ERROR;
        }
    }
    let rc = r.send_header();
    if rc == Status::NGX_ERROR || rc.0 > Status::NGX_OK.0 || r.header_only() {
        return finalize(raw, rc);
    }
    let Some(mut buf) = r.pool().create_buffer(body.len()) else {
        return Status::NGX_ERROR;
    };
    let b = buf.as_ngx_buf_mut();
    // SAFETY: a fresh temporary buffer of body.len() bytes.
    unsafe {
        core::ptr::copy_nonoverlapping(body.as_ptr(), (*b).pos, body.len());
        (*b).last = (*b).pos.add(body.len());
        (*b).set_last_buf(1);
        (*b).set_last_in_chain(1);
    }
    let mut out = ngx_chain_t {
        buf: b,
        next: core::ptr::null_mut(),
    };
    let rc = r.output_filter(&mut out);
    finalize(raw, rc)
}

fn finalize(r: *mut ngx_http_request_t, rc: Status) -> Status {
    // SAFETY: the request is live; after this call it may be freed, and we
    // return NGX_DONE so the phase engine does not touch it again.
    unsafe { nginx_sys::ngx_http_finalize_request(r, rc.0) };
    Status::NGX_DONE
}

/// Adds the rate-limit headers (SPEC §3) for the request's verdict.
pub fn add_rate_limit_headers(r: &mut Request, shield: &Shield) -> Option<()> {
    let (Some(verdict), Some(limit)) = (shield.verdict, shield.policy.limit) else {
        return Some(());
    };
    let mode = shield.policy.headers;
    let reset_at_s = (shield.decided_at_ms.saturating_add(verdict.reset_after_ms)).div_ceil(1000);
    if matches!(mode, HeadersMode::X | HeadersMode::Both) {
        r.add_header_out("X-RateLimit-Limit", &limit.requests.to_string())?;
        r.add_header_out("X-RateLimit-Remaining", &verdict.remaining.to_string())?;
        r.add_header_out("X-RateLimit-Reset", &reset_at_s.to_string())?;
    }
    if matches!(mode, HeadersMode::Ietf | HeadersMode::Both) {
        let window_s = limit.window_ms.div_ceil(1000);
        let policy = format!("\"pow-shield\";q={};w={window_s}", limit.requests);
        let now = format!(
            "\"pow-shield\";r={};t={}",
            verdict.remaining,
            verdict.reset_after_ms.div_ceil(1000)
        );
        r.add_header_out("RateLimit-Policy", &policy)?;
        r.add_header_out("RateLimit", &now)?;
    }
    Some(())
}

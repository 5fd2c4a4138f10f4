//! What the request says about its client, read at the edge: its address
//! (`$remote_addr`, after realip), the `X-PoW-*` headers of a solution,
//! the client key (evaluated once per request; the default key made
//! without the variable machinery), whether `trusted=` holds, and whether
//! a key is the client's address (for the breaker's log lines, which
//! fail2ban reads).

use core::ops::ControlFlow;
use core::ptr::NonNull;
use std::net::IpAddr;

use nginx_sys::{ngx_http_request_t, ngx_list_part_t, ngx_table_elt_t};
use ngx::http::Request;

use super::key::{evaluate_key, net_key, peer_ip, pooled};
use super::state::{Evaluated, RequestState};
use crate::config::Policy;
use crate::ffi::bytes;
use crate::protocol::Proof;
use pow_shield_core::limiter::client::client_id;
use pow_shield_core::limiter::key_plan::KeyFrom;
use pow_shield_core::limiter::MAX_LIMITS;
use pow_shield_core::store::{KeyValues, CLIENT_KEYS};

/// The first `X-PoW-Challenge`, `X-PoW-Nonce` and `X-PoW-Solution`
/// request headers, in one pass (every request of a shielded location
/// looks for them): the token and the proof ([`walk_pow_headers`]).
/// (Inline: the handler's one call, on every request.)
#[inline(always)]
pub(super) fn pow_headers(r: &Request) -> (Option<&[u8]>, Proof<'_>) {
    let (mut token, mut proof) = (None, Proof::default());
    // (The walk never breaks here: every header is read.)
    let _ = walk_pow_headers(r, |header, value| {
        let slot = match header {
            PowHeader::Challenge => &mut token,
            PowHeader::Nonce => &mut proof.nonce,
            PowHeader::Solution => &mut proof.solution,
        };
        if slot.is_none() {
            *slot = Some(value);
        }
        ControlFlow::Continue(())
    });
    (token, proof)
}

/// Whether the request carries an `X-PoW-Challenge` or `X-PoW-Nonce`
/// header: a payment [`pow_headers`] would read (an `X-PoW-Solution`
/// alone is none, as `handler::payment` reads it). The straight path's
/// one question, answered at the first such header.
#[inline(always)]
pub(super) fn carries_payment(r: &Request) -> bool {
    walk_pow_headers(r, |header, _| match header {
        PowHeader::Challenge | PowHeader::Nonce => ControlFlow::Break(()),
        PowHeader::Solution => ControlFlow::Continue(()),
    })
    .is_break()
}

/// One of the three headers a payment is read from.
#[derive(Clone, Copy)]
enum PowHeader {
    Challenge,
    Nonce,
    Solution,
}

/// Each `X-PoW-*` header of `r` and its value, in order, to `seen` until it
/// breaks. nginx's list of the request headers is walked as it is, part by
/// part, without an iterator's conversions: most requests carry none.
#[inline(always)]
fn walk_pow_headers<'r>(
    r: &'r Request,
    mut seen: impl FnMut(PowHeader, &'r [u8]) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let raw: &ngx_http_request_t = r.as_ref();
    let mut part: *const ngx_list_part_t = &raw.headers_in.headers.part;
    // SAFETY: the request's header list is nginx's: each part holds `nelts`
    // headers at `elts`, the parts are linked until a null `next`, and all
    // of it lives in the request's pool, as long as `r`.
    while let Some(p) = unsafe { part.as_ref() } {
        let headers: &[ngx_table_elt_t] = match p.nelts {
            0 => &[],
            // SAFETY: as above.
            n => unsafe { core::slice::from_raw_parts(p.elts.cast(), n) },
        };
        for header in headers {
            // By length first, read from nginx's string as it is: most
            // headers are none of the three, and are passed over without a
            // slice made or a byte compared.
            // (One compare passes over the names shorter or longer than
            // the three, `Host`, `User-Agent`, `Accept`...; one of 11 to 15
            // bytes, `Accept-Encoding`, `Content-Type`..., is matched by
            // its length next.)
            if !(11..=15).contains(&header.key.len) {
                continue;
            }
            let (which, name) = match header.key.len {
                15 => (PowHeader::Challenge, &b"x-pow-challenge"[..]),
                11 => (PowHeader::Nonce, &b"x-pow-nonce"[..]),
                14 => (PowHeader::Solution, &b"x-pow-solution"[..]),
                _ => continue,
            };
            if bytes(&header.key).eq_ignore_ascii_case(name) {
                seen(which, bytes(&header.value))?;
            }
        }
        part = p.next;
    }
    ControlFlow::Continue(())
}

/// `$remote_addr` (after realip): what challenges are bound to.
pub(super) fn client_addr(r: &Request) -> String {
    // SAFETY: a request's connection is live while the request is.
    let c = unsafe { &*r.connection() };
    String::from_utf8_lossy(bytes(&c.addr_text)).into_owned()
}

/// The client key, in the request pool (no copy), evaluated once per
/// request: every store operation of the request uses it. Empty: exempt.
#[inline(always)]
pub(super) fn client_key<'r>(r: &Request, state: NonNull<RequestState>) -> Option<&'r [u8]> {
    // SAFETY: the state lives in the request's pool, and no other borrow of
    // it is live while the key is read or set.
    let st = unsafe { &mut *state.as_ptr() };
    if st.key.is_none() {
        st.key = Some(evaluate_key(r, st.policy())?);
    }
    st.key.map(pooled)
}

/// A request's `key=` values by limit, as the stores take them.
pub(super) type Values<'r> = [Option<&'r [u8]>; MAX_LIMITS];

/// Each limit's `key=` value (`pow_shield_limit ... key=`), in the
/// request pool, evaluated once per request as the client key is, and
/// kept in the state (`None` inside for a limit counted per client key);
/// none kept when no limit of the location has a `key=`.
pub(super) fn keep_key_values(r: &Request, state: NonNull<RequestState>) -> Option<()> {
    // SAFETY: the state lives in the request's pool; each borrow of it is
    // short (evaluating a key may read the state, in `bot::bot_value`).
    let st = || unsafe { &mut *state.as_ptr() };
    let policy = st().policy();
    // No `key=` at all (the common case): nothing to evaluate, and the
    // state keeps `None`, which reads as every limit per client key.
    if st().key_values.is_none() && !policy.key_plan.is_empty() {
        let mut made = [None; MAX_LIMITS];
        evaluate_key_values(r, policy, &mut made)?;
        st().key_values = Some(made);
    }
    Some(())
}

/// [`keep_key_values`], and the values kept written to `values` as the
/// stores take them (as many as the limits; none written when none are
/// kept). (Inline, into the caller's own values: not made in one place and
/// moved to another.)
#[inline(always)]
pub(super) fn key_values<'r>(
    r: &Request,
    state: NonNull<RequestState>,
    values: &mut Values<'r>,
) -> Option<()> {
    keep_key_values(r, state)?;
    // SAFETY: as in `keep_key_values`; nothing else borrows the state here.
    let st = unsafe { &*state.as_ptr() };
    if let Some(kept) = &st.key_values {
        let n = st.policy().limits.len();
        for (value, kept) in values.iter_mut().zip(kept.iter().take(n)) {
            *value = kept.map(pooled);
        }
    }
    Some(())
}

/// `policy`'s `key=` values for `r`, evaluated now into `values` at their
/// limits' places (each `key=` text once, however many limits count per
/// it: the location's key plan), as the state keeps them; the places of
/// limits without `key=` are left as they are.
pub(super) fn evaluate_key_values(
    r: &Request,
    policy: &Policy,
    values: &mut Evaluated,
) -> Option<()> {
    policy.key_plan.fill(values, |from| match from {
        // The variable alone: made without nginx's complex-value machinery
        // (`key::net_key`).
        KeyFrom::Net => net_key(r),
        KeyFrom::Source(cv) => {
            // SAFETY: a key source is a complex value compiled at
            // configuration time (null: none was, an error).
            let cv = unsafe { cv.as_ref() }?;
            let bytes = r.get_complex_value(cv)?.as_bytes();
            // (A variable's name as text, from a `geo`: left out.)
            let bytes = crate::config::key_values::counted(r, policy, cv, bytes, || {
                is_address_key(r, bytes)
            });
            Some((bytes.as_ptr(), bytes.len()))
        }
        // (`fill` copies a shared value itself.)
        KeyFrom::Same(_) => None,
    })
}

/// The `key=` values the state keeps for `policy`'s limits, as the stores
/// take them (only the limits' places are read).
pub(super) fn pooled_values<'r>(kept: &Evaluated, policy: &Policy) -> Values<'r> {
    let mut values = [None; MAX_LIMITS];
    for (value, kept) in values.iter_mut().zip(kept.iter().take(policy.limits.len())) {
        *value = kept.map(pooled);
    }
    values
}

/// The values of `policy`'s limits, as a [`pow_shield_core::store::Subject`]
/// borrows them (none: every limit per client key).
pub(super) fn values_of<'a>(policy: &Policy, values: Option<&'a Values<'a>>) -> KeyValues<'a> {
    match values {
        Some(each) => each.get(..policy.limits.len()).unwrap_or(CLIENT_KEYS),
        None => CLIENT_KEYS,
    }
}

/// `trusted=` of `pow_shield_fail closed`: non-empty and not "0".
pub(super) fn trusted(r: &Request, policy: &Policy) -> bool {
    // SAFETY: compiled at configuration time when set.
    let Some(cv) = (unsafe { policy.trusted.as_ref() }) else {
        return false;
    };
    matches!(r.get_complex_value(cv), Some(v) if !v.is_empty() && v.as_bytes() != b"0")
}

/// Whether `key` is the client's address (after realip) in one of the
/// forms a configuration counts by: its `$pow_shield_client`, its
/// `$remote_addr` text or its `$binary_remote_addr` bytes (4 for IPv4, 16
/// for IPv6; a UNIX-domain peer's is the text), whether the key is that
/// variable or a `map` (or `geo` and `map`) that gave it for this client.
/// An empty key (exempt) is none. A key of another source (an API key)
/// equals none of them, unless it is this very client's own address.
pub(super) fn is_address_key(r: &Request, key: &[u8]) -> bool {
    if key.is_empty() {
        return false;
    }
    // SAFETY: a request's connection is live while the request is.
    let c = unsafe { &*r.connection() };
    // SAFETY: nginx filled the live connection's sockaddr.
    let ip = unsafe { peer_ip(c) };
    key == client_id(ip).as_str().as_bytes()
        || key == bytes(&c.addr_text)
        || match ip {
            Some(IpAddr::V4(v4)) => key == v4.octets(),
            Some(IpAddr::V6(v6)) => key == v6.octets(),
            None => false,
        }
}

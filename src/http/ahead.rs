//! Challenges the shield signs: the one a 429 (or a refused solution)
//! sends, and the next one sent ahead with a passed request (SPEC §4,
//! "Paying ahead": `X-PoW-Next-*` on a response after which the client has
//! no free request left, and on every response to a paid request), so that
//! a client that pays makes one round trip per request.

use std::borrow::Cow;

use nginx_sys::ngx_http_request_t;
use ngx::http::{HttpModuleMainConf, Request};

use super::response::push_header;
use super::state::RequestState;
use crate::config::{MainConf, Policy};
use crate::ffi::{bytes, now_ms, PowShield};
use crate::protocol::{self, wire, Challenge};
use crate::store::Stores;
use pow_shield_core::decision::Final;

/// A challenge of `bits` for this client, bound to the location's price
/// policy and its key; `struck`: the 429 that sends it counted a strike
/// (paying it takes that one back), its `Retry-After` the decision's.
/// `None` without keys or randomness.
pub(super) fn issue(
    r: &Request,
    mcf: &MainConf,
    policy: &Policy,
    key: &[u8],
    done: &Final,
    bits: u8,
    struck: bool,
) -> Option<Challenge> {
    let keys = mcf.keys.as_ref()?;
    // The client's slot's (a Redis Cluster's check answers it), else the
    // node's: the store's to say, of the key the stores count it under (a
    // dry run's own, as `handler::dry_run_key` makes it, in a slot of its
    // own; made only in a dry run).
    let stores = Stores::new(mcf, policy.fail);
    let counted: Cow<[u8]> = match policy.dry_run && !key.is_empty() {
        true => Cow::Owned([pow_shield_core::admin::DRY_RUN, key].concat()),
        false => Cow::Borrowed(key),
    };
    let generation = stores.challenge_generation(&counted, done.generation);
    let (now, ttl) = (now_ms(), policy.challenge_ttl_ms);
    let strike = match (struck, done.verdict) {
        // (Beyond the token's life it says nothing more.)
        (true, Some(verdict)) => protocol::Strike::Counted {
            retry_at_ms: now.saturating_add(verdict.retry_after_ms.min(ttl)),
        },
        (true, None) => protocol::Strike::Counted { retry_at_ms: now },
        (false, _) => protocol::Strike::None,
    };
    // The address text, borrowed (it is ASCII): no copy per challenge.
    // SAFETY: a request's connection is live while the request is.
    let addr = String::from_utf8_lossy(bytes(unsafe { &(*r.connection()).addr_text }));
    protocol::issue_bound_challenge(
        keys,
        &addr,
        now,
        ttl,
        bits,
        generation,
        binding(policy, key),
        strike,
    )
    .ok()
}

/// What the location's challenges are bound to for this client key.
pub(super) fn binding(policy: &Policy, key: &[u8]) -> protocol::Binding {
    protocol::Binding {
        policy: policy.price_id,
        client: protocol::client_id(key),
        work: policy.work,
    }
}

/// Whether `name` is one of the next challenge's headers (those
/// [`add_next_challenge`] sends), in any case.
pub(super) fn is_next_header(name: &[u8]) -> bool {
    [
        wire::HEADER_NEXT_CHALLENGE,
        wire::HEADER_NEXT_BITS,
        wire::HEADER_NEXT_DIFFICULTY,
        wire::HEADER_ALGORITHM,
    ]
    .iter()
    .any(|ours| name.eq_ignore_ascii_case(ours.as_bytes()))
}

/// Adds the next challenge to a passed request's response, if its
/// decision asked for one. Its 429 counted no strike: paying it takes none
/// back, and under the limit it is not spent.
pub(super) fn add_next_challenge(r: &mut Request, state: &RequestState) -> Option<()> {
    // (A reference: every passed response comes here, most with nothing
    // to add.)
    let Some((done, _)) = &state.decided else {
        return Some(());
    };
    let (Some(bits), Some(mcf)) = (done.next, PowShield::main_conf(r)) else {
        return Some(());
    };
    let key = match state.key {
        // SAFETY: the key was made in the request's pool, which lives as
        // long as the request.
        Some((data, len)) if len > 0 => unsafe { core::slice::from_raw_parts(data, len) },
        _ => return Some(()),
    };
    // The next challenge is an offer: a response goes out without one
    // rather than not at all.
    let Some(challenge) = issue(r, mcf, state.policy(), key, done, bits, false) else {
        return Some(());
    };
    let (bits, difficulty) = (challenge.bits.to_string(), challenge.difficulty.to_string());
    let raw: *mut ngx_http_request_t = (&mut *r).into();
    // Only Equi-X says so: a SHA-256 challenge is as it always was.
    let algorithm = (challenge.work != protocol::Work::Sha256).then(|| {
        (
            wire::HEADER_ALGORITHM,
            "x-pow-algorithm",
            challenge.work.name(),
        )
    });
    for (name, lowcase, value) in [
        (
            wire::HEADER_NEXT_CHALLENGE,
            "x-pow-next-challenge",
            challenge.token.as_str(),
        ),
        (wire::HEADER_NEXT_BITS, "x-pow-next-bits", bits.as_str()),
        (
            wire::HEADER_NEXT_DIFFICULTY,
            "x-pow-next-difficulty",
            difficulty.as_str(),
        ),
    ]
    .into_iter()
    .chain(algorithm)
    {
        // SAFETY: the request's pool lives as long as the request; the
        // copy is `value.len()` bytes.
        let value = unsafe { nginx_sys::ngx_str_t::from_bytes((*raw).pool, value.as_bytes()) }?;
        push_header(r, name, lowcase, value)?;
    }
    Some(())
}

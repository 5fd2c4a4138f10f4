//! Verifying a solved challenge (docs/protocol.md §6): the checks run
//! in the documented order and the first failure is the answer.

use sha2::{Digest, Sha256};

use super::algorithm::{proves, Proof, Work};
use super::binding::Expected;
use super::keys::SecretKeys;
use super::token::{TokenParts, MAX_PAYLOAD_LEN};

/// How far in the future a token's `ts` may lie (clock skew between nodes).
pub const FUTURE_SKEW_MS: u64 = 5_000;

/// Why a solution was refused; each maps to one row of the docs/protocol.md §7.2 table.
/// (409 "already spent" is the replay store's answer: [`SPENT_STATUS`].)
///
/// [`SPENT_STATUS`]: super::SPENT_STATUS
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// Only one of the two headers, or a token that is not `a.b`.
    Malformed,
    /// The MAC matches neither the current nor the previous key.
    BadSignature,
    /// The signed payload is not base64url JSON with the protocol's fields.
    BadPayload,
    /// The challenge was issued to another client address.
    WrongIp,
    /// The challenge was issued to another client key (of the same
    /// address: a token spent once per key).
    WrongClient,
    /// The challenge was issued where another price policy holds (another
    /// location's limits or difficulty): a cheap location's token buys
    /// nothing dear.
    WrongPolicy,
    /// Past its `exp` (a token without one: older than the TTL), or issued
    /// more than 5 s in the future.
    Expired,
    /// The nonce is not 1..=20 digits, or the hash lacks the zero bits;
    /// with Equi-X, also: no `X-PoW-Solution`, or not an Equi-X solution
    /// of `salt ‖ nonce`; and a token of another algorithm than the
    /// location's.
    WrongSolution,
}

impl Rejection {
    /// The HTTP status from the docs/protocol.md §7.2 table.
    pub fn status(&self) -> u16 {
        match self {
            Rejection::Malformed | Rejection::BadPayload => 400,
            Rejection::BadSignature | Rejection::WrongIp | Rejection::WrongClient => 403,
            Rejection::WrongPolicy => 409,
            Rejection::Expired => 410,
            Rejection::WrongSolution => 422,
        }
    }

    /// The `error` text from the docs/protocol.md §7.2 table, verbatim.
    pub fn message(&self) -> &'static str {
        match self {
            Rejection::Malformed => "Malformed challenge token",
            Rejection::BadSignature => "Invalid challenge signature",
            Rejection::BadPayload => "Invalid payload encoding",
            Rejection::WrongIp => "Challenge was not issued for this IP",
            Rejection::WrongClient => "Challenge was not issued for this client",
            Rejection::WrongPolicy => "Challenge was issued for another location",
            Rejection::Expired => "Challenge expired",
            Rejection::WrongSolution => "Incorrect PoW solution",
        }
    }

    /// A short label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::Malformed => "malformed",
            Rejection::BadSignature => "signature",
            Rejection::BadPayload => "payload",
            Rejection::WrongIp => "ip",
            // (One metrics label: the zone's counters have room for one.)
            Rejection::WrongClient | Rejection::WrongPolicy => "binding",
            Rejection::Expired => "expired",
            Rejection::WrongSolution => "solution",
        }
    }

    /// Whether the response carries a fresh challenge (docs/protocol.md §7.2: 410, 422
    /// and a token of another client or policy; 409 too, but that is
    /// decided by the replay store).
    pub fn wants_fresh_challenge(&self) -> bool {
        matches!(
            self,
            Rejection::Expired
                | Rejection::WrongSolution
                | Rejection::WrongClient
                | Rejection::WrongPolicy
        )
    }
}

/// A correct solution. It still has to pass the replay store before the
/// request is admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Solved {
    /// SHA-256 of the whole token text: the replay-cache key.
    pub digest: [u8; 32],
    /// Leading zero bits that were proven: `max(payload bits, minimum)`.
    pub bits: u8,
    /// The token's `ts`, epoch ms.
    pub issued_at_ms: u64,
    /// The token's `exp`, epoch ms (`None`: a token without one).
    pub expires_at_ms: Option<u64>,
    /// The token's `gen`: the store generation it was issued in.
    pub generation: Option<u64>,
    /// Its 429 counted a strike (the token's `st`; a token without one:
    /// true, as the servers that issued such tokens took one back).
    pub struck: bool,
    /// When its 429's `Retry-After` ended (the token's `ra`, epoch ms):
    /// from then on a wait may have taken its strike back. `None`: a
    /// token without one.
    pub retry_at_ms: Option<u64>,
}

impl Solved {
    /// Until when the spent record must be kept (epoch ms): while any node
    /// could still accept the token, i.e. its `exp` plus the clock
    /// allowance (a node whose clock lags accepts it that much later),
    /// whatever the nodes' `pow_shield_challenge_ttl`. A token without
    /// `exp` (from a node that predates it): its `ts` plus the longest TTL
    /// of this configuration plus the allowance.
    pub fn spent_until_ms(&self, longest_ttl_ms: u64) -> u64 {
        self.expires_at_ms
            .unwrap_or_else(|| self.issued_at_ms.saturating_add(longest_ttl_ms))
            .saturating_add(FUTURE_SKEW_MS)
    }
}

/// Verifies the `X-PoW-Challenge` / `X-PoW-Nonce` pair for `client_ip` at
/// `now_ms`, in the docs/protocol.md §6 order. The hash must start with the
/// token's `bits` zero bits (`4 × difficulty` for a token without `bits`),
/// and at least `min_bits` even if the token asks for fewer, so a challenge
/// issued where it was easier cannot be spent where it is harder. A token is accepted
/// until its signed `exp`; `ttl_ms` (this node's challenge TTL) applies
/// only to tokens without one. Does not allocate
/// unless the payload's strings contain JSON escapes.
pub fn verify_solution(
    keys: &SecretKeys,
    token: Option<&[u8]>,
    nonce: Option<&[u8]>,
    client_ip: &str,
    min_bits: u8,
    now_ms: u64,
    ttl_ms: u64,
) -> Result<Solved, Rejection> {
    verify_bound(
        keys, token, nonce, client_ip, min_bits, now_ms, ttl_ms, None,
    )
}

/// [`verify_solution`] where the token must also be bound to what it buys
/// (docs/protocol.md §4): issued to `expected`'s client key, under its price policy,
/// checked right after the address. A token without a binding (issued by
/// a node that predates it) must prove `expected.max_bits`.
#[allow(clippy::too_many_arguments)]
pub fn verify_bound(
    keys: &SecretKeys,
    token: Option<&[u8]>,
    nonce: Option<&[u8]>,
    client_ip: &str,
    min_bits: u8,
    now_ms: u64,
    ttl_ms: u64,
    expected: Option<&Expected>,
) -> Result<Solved, Rejection> {
    let proof = Proof {
        nonce,
        solution: None,
    };
    verify_paid(
        keys, token, proof, client_ip, min_bits, now_ms, ttl_ms, expected,
    )
}

/// [`verify_bound`] of a proof of either algorithm: `X-PoW-Nonce`, and
/// for a token whose `alg` is Equi-X `X-PoW-Solution`. The work is the
/// token's, and must be `expected`'s (the location's): a token of the
/// other algorithm is a wrong solution. The cheap checks (MAC, fields,
/// binding, expiry) come first; the work (an Equi-X verification: tens of
/// microseconds) last, and nothing here writes anywhere.
#[allow(clippy::too_many_arguments)]
pub fn verify_paid(
    keys: &SecretKeys,
    token: Option<&[u8]>,
    proof: Proof<'_>,
    client_ip: &str,
    min_bits: u8,
    now_ms: u64,
    ttl_ms: u64,
    expected: Option<&Expected>,
) -> Result<Solved, Rejection> {
    let (Some(token), Some(_)) = (token, proof.nonce) else {
        return Err(Rejection::Malformed);
    };
    let parts = TokenParts::split(token).ok_or(Rejection::Malformed)?;
    if !parts.is_signed_by(keys) {
        return Err(Rejection::BadSignature);
    }
    let mut buf = [0u8; MAX_PAYLOAD_LEN];
    let payload = parts
        .decode_payload(&mut buf)
        .ok_or(Rejection::BadPayload)?;
    if payload.ip != client_ip {
        return Err(Rejection::WrongIp);
    }
    let mut min_bits = min_bits;
    if let Some(expected) = expected {
        if payload.ck.is_some_and(|ck| ck != expected.binding.client) {
            return Err(Rejection::WrongClient);
        }
        match payload.pol {
            Some(pol) if pol != expected.binding.policy => return Err(Rejection::WrongPolicy),
            Some(_) => {}
            None => min_bits = min_bits.max(expected.max_bits),
        }
    }
    let expires_at_ms = payload.exp.unwrap_or(payload.ts.saturating_add(ttl_ms));
    let too_old = now_ms > expires_at_ms;
    let too_new = payload.ts > now_ms.saturating_add(FUTURE_SKEW_MS);
    if too_old || too_new {
        return Err(Rejection::Expired);
    }
    // is_well_formed() bounded it to 1..=48.
    let bits = payload
        .required_bits()
        .ok_or(Rejection::BadPayload)?
        .max(min_bits);
    let work = payload.work().ok_or(Rejection::BadPayload)?;
    let location_work = expected.map_or(Work::Sha256, |e| e.binding.work);
    if work != location_work || !proves(work, payload.salt.as_bytes(), proof, bits) {
        return Err(Rejection::WrongSolution);
    }
    Ok(Solved {
        digest: Sha256::digest(token).into(),
        bits,
        issued_at_ms: payload.ts,
        expires_at_ms: payload.exp,
        generation: payload.gen,
        struck: payload.st != Some(0),
        retry_at_ms: payload.ra,
    })
}

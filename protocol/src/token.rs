//! Challenge tokens (docs/protocol.md §4):
//! `base64url(payload) "." base64url(HMAC-SHA256(key, base64url(payload)))`,
//! URL-safe base64 without padding, the MAC over the encoded payload text.

use std::borrow::Cow;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};

use super::algorithm::Work;
use super::binding::Binding;
use super::keys::{pooled_random, RandomError, Secret, SecretKeys};
use super::wire::{decimal, escaped};
use super::{hex_digits_for_bits, MAX_BITS, MAX_DIFFICULTY, MIN_BITS, MIN_DIFFICULTY};

/// Random salt bytes per challenge (docs/protocol.md §4).
pub const SALT_LEN: usize = 16;

/// Length of an HMAC-SHA256 tag.
const MAC_LEN: usize = 32;

/// Length of the tag in unpadded base64: `ceil(32 * 4 / 3)`.
const MAC_B64_LEN: usize = 43;

/// Largest decoded payload accepted. Issued payloads are about 120 bytes
/// plus the address; this bound lets verification decode on the stack.
pub const MAX_PAYLOAD_LEN: usize = 1024;

/// A freshly issued challenge: what the 429 response tells the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// The signed token for `X-PoW-Challenge` and the body's `challenge`.
    pub token: String,
    /// The salt as 32 lower-case hex characters (16 random bytes).
    pub salt: String,
    /// Leading hex zeros that certainly prove `bits`: `⌈bits / 4⌉`, 1..=12
    /// (`X-PoW-Difficulty`, for clients that know only hex digits).
    pub difficulty: u8,
    /// Leading zero bits required, within 1..=48 (`X-PoW-Bits`).
    pub bits: u8,
    /// Issue time (the payload's `ts`), epoch milliseconds.
    pub issued_at_ms: u64,
    /// Expiry (the payload's `exp`), epoch milliseconds.
    pub expires_at_ms: u64,
    /// What pays it (the payload's `alg`; `X-PoW-Algorithm`).
    pub work: Work,
}

/// Issues a stateless challenge for `client_ip` with a fresh random salt,
/// valid for `ttl_ms` (its signed `exp`), asking for `bits` leading zero
/// bits, clamped to 1..=48 so that every issued token verifies.
pub fn issue_challenge_bits(
    keys: &SecretKeys,
    client_ip: &str,
    now_ms: u64,
    ttl_ms: u64,
    bits: u8,
) -> Result<Challenge, RandomError> {
    issue_challenge_bits_in(keys, client_ip, now_ms, ttl_ms, bits, None)
}

/// [`issue_challenge_bits`] of `difficulty` hex digits (`4 × difficulty`
/// bits), `difficulty` clamped to 1..=12.
pub fn issue_challenge(
    keys: &SecretKeys,
    client_ip: &str,
    now_ms: u64,
    ttl_ms: u64,
    difficulty: u8,
) -> Result<Challenge, RandomError> {
    let bits = 4 * difficulty.clamp(MIN_DIFFICULTY, MAX_DIFFICULTY);
    issue_challenge_bits(keys, client_ip, now_ms, ttl_ms, bits)
}

/// [`issue_challenge_bits`] for a store's data generation (the signed
/// `gen`, docs/protocol.md §4): a node accepts the solution only within
/// the generation it names (`None`: the field is left out).
pub fn issue_challenge_bits_in(
    keys: &SecretKeys,
    client_ip: &str,
    now_ms: u64,
    ttl_ms: u64,
    bits: u8,
    generation: Option<u64>,
) -> Result<Challenge, RandomError> {
    let extra = Extra {
        generation,
        bound: None,
    };
    issue_random(keys, client_ip, (now_ms, ttl_ms), bits, extra)
}

/// What the 429 that sends a challenge did to the client's strikes: its
/// token's `st` and `ra` (docs/protocol.md §4, "What a token binds").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strike {
    /// None (a challenge sent ahead, a 409/410/422's fresh one, strikes
    /// off): paying it takes nothing back.
    None,
    /// One, which paying the challenge takes back; `retry_at_ms` is when
    /// the 429's `Retry-After` ends (epoch ms): no wait can have taken
    /// that strike back before.
    Counted { retry_at_ms: u64 },
}

/// A challenge bound to what it buys (docs/protocol.md §4, "What a token
/// binds"): `binding` names the issuing location's price policy and the
/// client key, `strike` what the 429 that sends it counted (paying it
/// takes that strike back, and no other).
#[allow(clippy::too_many_arguments)]
pub fn issue_bound_challenge(
    keys: &SecretKeys,
    client_ip: &str,
    now_ms: u64,
    ttl_ms: u64,
    bits: u8,
    generation: Option<u64>,
    binding: Binding,
    strike: Strike,
) -> Result<Challenge, RandomError> {
    let extra = Extra {
        generation,
        bound: Some((binding, strike)),
    };
    issue_random(keys, client_ip, (now_ms, ttl_ms), bits, extra)
}

/// [`issue`] with a fresh random salt.
fn issue_random(
    keys: &SecretKeys,
    client_ip: &str,
    (now_ms, ttl_ms): (u64, u64),
    bits: u8,
    extra: Extra,
) -> Result<Challenge, RandomError> {
    let mut salt = [0u8; SALT_LEN];
    pooled_random(&mut salt)?;
    Ok(issue(keys, client_ip, now_ms, ttl_ms, bits, salt, extra))
}

/// The optional signed fields of an issued token.
#[derive(Clone, Copy, Default)]
struct Extra {
    generation: Option<u64>,
    bound: Option<(Binding, Strike)>,
}

/// [`issue_challenge`] with a caller-chosen salt: deterministic, for tests
/// and benchmarks. Signs with the current key.
pub fn issue_challenge_with_salt(
    keys: &SecretKeys,
    client_ip: &str,
    now_ms: u64,
    ttl_ms: u64,
    difficulty: u8,
    salt: [u8; SALT_LEN],
) -> Challenge {
    let bits = 4 * difficulty.clamp(MIN_DIFFICULTY, MAX_DIFFICULTY);
    issue(
        keys,
        client_ip,
        now_ms,
        ttl_ms,
        bits,
        salt,
        Extra::default(),
    )
}

/// [`issue_challenge_bits`] with a caller-chosen salt: deterministic, for
/// tests and benchmarks. Signs with the current key.
pub fn issue_challenge_bits_with_salt(
    keys: &SecretKeys,
    client_ip: &str,
    now_ms: u64,
    ttl_ms: u64,
    bits: u8,
    salt: [u8; SALT_LEN],
) -> Challenge {
    issue(
        keys,
        client_ip,
        now_ms,
        ttl_ms,
        bits,
        salt,
        Extra::default(),
    )
}

fn issue(
    keys: &SecretKeys,
    client_ip: &str,
    now_ms: u64,
    ttl_ms: u64,
    bits: u8,
    salt: [u8; SALT_LEN],
    extra: Extra,
) -> Challenge {
    let bits = bits.clamp(MIN_BITS, MAX_BITS);
    let difficulty = hex_digits_for_bits(bits);
    let salt = hex_text(&salt);
    let expires_at_ms = now_ms.saturating_add(ttl_ms);
    let work = extra.bound.map(|(b, _)| b.work);
    let payload = Payload {
        ip: Cow::Borrowed(client_ip),
        ts: now_ms,
        difficulty: u64::from(difficulty),
        salt: Cow::Borrowed(&salt),
        exp: Some(expires_at_ms),
        gen: extra.generation,
        bits: Some(u64::from(bits)),
        pol: extra.bound.map(|(b, _)| b.policy),
        ck: extra.bound.map(|(b, _)| b.client),
        st: extra
            .bound
            .map(|(_, strike)| u8::from(strike != Strike::None)),
        ra: match extra.bound {
            Some((_, Strike::Counted { retry_at_ms })) => Some(retry_at_ms),
            _ => None,
        },
        // Absent for SHA-256: its tokens stay as they were.
        alg: work
            .filter(|w| *w != Work::Sha256)
            .map(|w| Cow::Borrowed(w.name())),
    };
    let token = sign_payload(&keys.current, &payload.to_json());
    Challenge {
        token,
        salt,
        difficulty,
        bits,
        issued_at_ms: now_ms,
        expires_at_ms,
        work: work.unwrap_or_default(),
    }
}

/// What a token says, read without checking its signature: a client knows
/// no key, and the server checks everything anyway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenInfo {
    /// Client address the challenge was issued to.
    pub ip: String,
    /// Issue time, epoch milliseconds.
    pub issued_at_ms: u64,
    /// Leading hex zeros (1..=12): `⌈bits / 4⌉`.
    pub difficulty: u8,
    /// Leading zero bits required (1..=48); `4 × difficulty` for a token
    /// from a server that predates `bits`.
    pub bits: u8,
    /// The salt, as hex text.
    pub salt: String,
    /// Expiry, epoch milliseconds; `None` for a token from a server that
    /// predates `exp` (it expires `expires_in` seconds after `ts`).
    pub expires_at_ms: Option<u64>,
    /// What pays it (`alg`; SHA-256 when absent).
    pub work: Work,
}

/// Reads a token's payload without verifying its MAC; `None` unless it is
/// `a.b` with a well-formed payload.
pub fn read_unverified(token: &str) -> Option<TokenInfo> {
    let parts = TokenParts::split(token.as_bytes())?;
    let mut buf = [0u8; MAX_PAYLOAD_LEN];
    let payload = parts.decode_payload(&mut buf)?;
    let bits = payload.required_bits()?;
    let work = payload.work()?;
    Some(TokenInfo {
        ip: payload.ip.into_owned(),
        issued_at_ms: payload.ts,
        difficulty: u8::try_from(payload.difficulty).ok()?,
        bits,
        work,
        salt: payload.salt.into_owned(),
        expires_at_ms: payload.exp,
    })
}

/// Whether a token was sent ahead of need (SPEC §4, "Paying ahead"): its
/// challenge counted no strike (`st` 0). Read without verifying the MAC:
/// the caller has verified it already.
pub fn sent_ahead(token: &[u8]) -> bool {
    let Some(parts) = TokenParts::split(token) else {
        return false;
    };
    let mut buf = [0u8; MAX_PAYLOAD_LEN];
    parts
        .decode_payload(&mut buf)
        .is_some_and(|payload| payload.st == Some(0))
}

/// `bytes` as lower-case hex.
fn hex_text(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(2 * bytes.len());
    crate::wire::push_hex(&mut text, bytes);
    text
}

/// Encodes `json` and signs it: the whole token text.
pub(crate) fn sign_payload(key: &Secret, json: &[u8]) -> String {
    let encoded = json.len().div_ceil(3) * 4;
    let mut token = String::with_capacity(encoded + 1 + MAC_B64_LEN);
    URL_SAFE_NO_PAD.encode_string(json, &mut token);
    let tag = key.tag(token.as_bytes());
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(tag, &mut token);
    token
}

/// The signed fields (docs/protocol.md §4). Unknown fields are ignored, so later
/// versions may add some.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Payload<'a> {
    /// Client address the challenge was issued to.
    #[serde(borrow)]
    pub ip: Cow<'a, str>,
    /// Issue time, epoch milliseconds.
    pub ts: u64,
    /// Leading hex zeros required.
    pub difficulty: u64,
    /// Salt as hex text; the hash input is this text, not its bytes.
    #[serde(borrow)]
    pub salt: Cow<'a, str>,
    /// Expiry, epoch milliseconds: acceptance and the spent record's
    /// lifetime come from it. Absent in tokens of servers that predate it
    /// (a rolling upgrade): the verifying node's TTL applies to those.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp: Option<u64>,
    /// The store's data generation the challenge was issued in (a cluster
    /// mode node's, docs/protocol.md §4); absent elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gen: Option<u64>,
    /// Leading zero bits required; `difficulty` is then `⌈bits / 4⌉`.
    /// Absent in tokens of servers that predate it: `4 × difficulty`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bits: Option<u64>,
    /// The issuing location's price policy (`binding::policy_id`). Absent
    /// in tokens of servers that predate it: such a token must prove the
    /// verifying location's highest price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pol: Option<u64>,
    /// The client key it was issued to (`binding::client_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ck: Option<u64>,
    /// 1 if the 429 that sent it counted a strike (paying it takes that
    /// strike back), 0 if not. Absent in tokens of servers that predate
    /// it: taken as 1, as those servers did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub st: Option<u8>,
    /// With `st` 1: when its 429's `Retry-After` ends, epoch milliseconds
    /// (no wait can have taken its strike back before). Absent in tokens
    /// of servers that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ra: Option<u64>,
    /// What pays it ([`Work::name`]); absent: SHA-256 (every token of a
    /// SHA-256 location, and of servers that predate it).
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub alg: Option<Cow<'a, str>>,
}

impl Payload<'_> {
    /// The payload as compact JSON, fields in the documented order:
    /// serde's bytes, written by hand (one per 429).
    pub(crate) fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(224 + self.ip.len() + self.salt.len());
        let put = &mut |part: &[u8]| out.extend_from_slice(part);
        put(b"{\"ip\":\"");
        escaped(&self.ip, put);
        put(b"\",\"ts\":");
        decimal(self.ts, &mut *put);
        put(b",\"difficulty\":");
        decimal(self.difficulty, &mut *put);
        put(b",\"salt\":\"");
        escaped(&self.salt, put);
        put(b"\"");
        let numbers = [
            (&b",\"exp\":"[..], self.exp),
            (b",\"gen\":", self.gen),
            (b",\"bits\":", self.bits),
            (b",\"pol\":", self.pol),
            (b",\"ck\":", self.ck),
            (b",\"st\":", self.st.map(u64::from)),
            (b",\"ra\":", self.ra),
        ];
        for (name, value) in numbers {
            if let Some(value) = value {
                put(name);
                decimal(value, &mut *put);
            }
        }
        if let Some(alg) = &self.alg {
            put(b",\"alg\":\"");
            escaped(alg, put);
            put(b"\"");
        }
        put(b"}");
        out
    }

    /// The leading zero bits this token asks for; `None` unless
    /// [`is_well_formed`](Self::is_well_formed).
    pub(crate) fn required_bits(&self) -> Option<u8> {
        let bits = match self.bits {
            Some(bits) => bits,
            None => self.difficulty.checked_mul(4)?,
        };
        u8::try_from(bits).ok()
    }

    /// What pays this token; `None` for an algorithm this version does
    /// not know.
    pub(crate) fn work(&self) -> Option<Work> {
        self.alg
            .as_deref()
            .map_or(Some(Work::Sha256), Work::from_name)
    }

    /// Whether the signed fields have the values docs/protocol.md §6 allows: difficulty
    /// 1..=12, `bits` (if any) 1..=48 with difficulty `⌈bits / 4⌉`, a salt
    /// of at least 16 bytes as hex, and an `exp` (if any) not before `ts`.
    fn is_well_formed(&self) -> bool {
        let salt = self.salt.as_bytes();
        let bits_agree = self.bits.is_none_or(|bits| {
            (u64::from(MIN_BITS)..=u64::from(MAX_BITS)).contains(&bits)
                && self.difficulty == bits.div_ceil(4)
        });
        (u64::from(MIN_DIFFICULTY)..=u64::from(MAX_DIFFICULTY)).contains(&self.difficulty)
            && bits_agree
            && self.exp.is_none_or(|exp| exp >= self.ts)
            && self.work().is_some()
            && salt.len() >= 2 * SALT_LEN
            && salt.len().is_multiple_of(2)
            && salt.iter().all(u8::is_ascii_hexdigit)
    }
}

/// A token split at its single `.`, both parts non-empty.
pub(crate) struct TokenParts<'a> {
    /// The base64url payload text (what the MAC covers).
    pub payload: &'a [u8],
    /// The base64url MAC text.
    pub mac: &'a [u8],
}

impl<'a> TokenParts<'a> {
    /// Splits `a.b`; `None` for anything else (docs/protocol.md §6: malformed).
    pub(crate) fn split(token: &'a [u8]) -> Option<TokenParts<'a>> {
        let dot = token.iter().position(|b| *b == b'.')?;
        let payload = token.get(..dot)?;
        let mac = token.get(dot + 1..)?;
        if payload.is_empty() || mac.is_empty() || mac.contains(&b'.') {
            return None;
        }
        Some(TokenParts { payload, mac })
    }

    /// Whether the MAC part is the canonical encoding of a tag over the
    /// payload text by any of `keys`. Compared in constant time. Only the
    /// canonical unpadded encoding is accepted, so a challenge has exactly
    /// one spelling and the replay cache (keyed on the token text) cannot be
    /// dodged by re-spelling it.
    pub(crate) fn is_signed_by(&self, keys: &SecretKeys) -> bool {
        if self.mac.len() != MAC_B64_LEN {
            return false;
        }
        // One spare byte: the decoder's length estimate for 43 characters is 33.
        let mut tag = [0u8; MAC_LEN + 1];
        let tag = match URL_SAFE_NO_PAD.decode_slice(self.mac, &mut tag) {
            Ok(MAC_LEN) => tag.get(..MAC_LEN).unwrap_or_default(),
            _ => return false,
        };
        let matches = |key: &Secret| key.verifies(self.payload, tag);
        matches(&keys.current) || keys.previous.as_ref().is_some_and(matches)
    }

    /// Decodes the payload into `buf` and parses it; `None` unless it is a
    /// JSON object with well-formed `ip`, `ts`, `difficulty` and `salt`.
    pub(crate) fn decode_payload<'b>(
        &self,
        buf: &'b mut [u8; MAX_PAYLOAD_LEN],
    ) -> Option<Payload<'b>> {
        let len = URL_SAFE_NO_PAD.decode_slice(self.payload, buf).ok()?;
        let json = buf.get(..len)?;
        // serde would also accept a JSON array for a struct; the protocol says object.
        if !json.trim_ascii_start().starts_with(b"{") {
            return None;
        }
        let payload: Payload<'b> = serde_json::from_slice(json).ok()?;
        payload.is_well_formed().then_some(payload)
    }
}

#[cfg(test)]
mod tests;

//! One request's Web Bot Auth signature, checked against the configured
//! bots' keys at a given time (docs/bots.md, "What verifies"). Anything
//! short of a valid signature of a known key is [`Anonymous`], with the
//! reason: never an error of the request.
//!
//! The `web-bot-auth` crate picks the label (`tag="web-bot-auth"`, with
//! `created`, `expires` and `keyid`, covering `@authority` or
//! `@target-uri`, and `signature-agent` when that header is present),
//! builds the signature base from the request and checks the Ed25519
//! signature. The rules here are the rest: `@authority` itself covered,
//! the times (at most [`MAX_LIFETIME_S`], [`CLOCK_ALLOWANCE_S`] of skew), a
//! nonce (the replay cache needs one), a key of a configured bot. The
//! replay cache itself is the caller's: it sees the nonce and its expiry.

use web_bot_auth::components::{CoveredComponent, DerivedComponent};
use web_bot_auth::keyring::Algorithm;
use web_bot_auth::WebBotAuthVerifier;

use crate::keys::Registry;
use crate::message::{Covered, Message};
use crate::message::{CLOCK_ALLOWANCE_S, MAX_LIFETIME_S};

/// A request signed by a configured bot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The bot, by index into [`Registry::names`].
    pub bot: usize,
    /// The key's thumbprint (`keyid`).
    pub keyid: String,
    /// The signature's nonce: seen twice within `expires`, the request is
    /// a replay.
    pub nonce: String,
    /// `expires`, epoch seconds.
    pub expires: i64,
}

/// Why a request stays anonymous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anonymous {
    /// No `Signature-Input` or no `Signature` field.
    Unsigned,
    /// No label fits Web Bot Auth, or the fields do not parse.
    Malformed,
    /// The signature does not cover `@authority`.
    NoAuthority,
    /// The signature has no `nonce`.
    NoNonce,
    /// `created` is later than now (beyond the allowance).
    NotYetValid,
    /// `expires` has passed (beyond the allowance).
    Expired,
    /// `expires - created` is above [`MAX_LIFETIME_S`] (1 h), or not
    /// positive.
    TooLong,
    /// `keyid` is none of the configured bots' keys, or `alg` is not
    /// `ed25519`.
    UnknownKey,
    /// The signature does not verify (another key, a changed field):
    /// checked against the key of the bot it names, by index into
    /// [`Registry::names`] (an Ed25519 verification was spent on it).
    BadSignature(usize),
}

impl Anonymous {
    /// A short word for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Anonymous::Unsigned => "unsigned",
            Anonymous::Malformed => "malformed",
            Anonymous::NoAuthority => "no_authority",
            Anonymous::NoNonce => "no_nonce",
            Anonymous::NotYetValid => "not_yet_valid",
            Anonymous::Expired => "expired",
            Anonymous::TooLong => "too_long",
            Anonymous::UnknownKey => "unknown_key",
            Anonymous::BadSignature(_) => "bad_signature",
        }
    }
}

/// Checks `message`'s signature against `registry` at `now` (epoch
/// seconds). Unsigned requests return at once, before any parsing.
pub fn verify(
    message: &(impl Message + ?Sized),
    registry: &Registry,
    now: i64,
) -> Result<Verified, Anonymous> {
    verify_with(message, registry, now, MAX_LIFETIME_S)
}

/// [`verify`] with another longest lifetime (the draft's v2 examples
/// claim a century).
pub fn verify_with(
    message: &(impl Message + ?Sized),
    registry: &Registry,
    now: i64,
    max_lifetime_s: i64,
) -> Result<Verified, Anonymous> {
    if message.field("signature-input").is_empty() || message.field("signature").is_empty() {
        return Err(Anonymous::Unsigned);
    }
    if registry.is_empty() {
        return Err(Anonymous::UnknownKey);
    }
    let covered = Covered(message);
    let verifier = WebBotAuthVerifier::parse(&covered).map_err(|_| Anonymous::Malformed)?;
    let label = verifier.get_parsed_label();
    let authority = CoveredComponent::Derived(DerivedComponent::Authority { req: false });
    if !label.base.components.contains_key(&authority) {
        return Err(Anonymous::NoAuthority);
    }
    let details = &label.base.parameters.details;
    let (Some(created), Some(expires)) = (details.created, details.expires) else {
        return Err(Anonymous::Malformed);
    };
    if expires <= created || expires - created > max_lifetime_s {
        return Err(Anonymous::TooLong);
    }
    if created > now.saturating_add(CLOCK_ALLOWANCE_S) {
        return Err(Anonymous::NotYetValid);
    }
    if expires.saturating_add(CLOCK_ALLOWANCE_S) <= now {
        return Err(Anonymous::Expired);
    }
    let Some(nonce) = details.nonce.clone().filter(|n| !n.is_empty()) else {
        return Err(Anonymous::NoNonce);
    };
    if details
        .algorithm
        .as_ref()
        .is_some_and(|a| *a != Algorithm::Ed25519)
    {
        return Err(Anonymous::UnknownKey);
    }
    let keyid = details.keyid.clone().ok_or(Anonymous::Malformed)?;
    let bot = registry.owner(&keyid).ok_or(Anonymous::UnknownKey)?;
    verifier
        .verify(registry.ring(), Some(keyid.clone()))
        .map_err(|_| Anonymous::BadSignature(bot))?;
    Ok(Verified {
        bot,
        keyid,
        nonce,
        expires,
    })
}

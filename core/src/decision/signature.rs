//! Whether a signed request's Web Bot Auth signature is verified
//! (docs/bots.md, "Blocked clients"). A verification costs an Ed25519
//! check (about 40 µs, against 0 to 5 for a whole unsigned request); a
//! client the circuit breaker has blocked gets the cheap block response and
//! nothing else (SPEC §3, red zone). So a signed request is first taken as
//! the anonymous client it is without its signature: when the breaker that
//! this node knows of has blocked that client, the signature is never
//! verified and the request stays anonymous, blocked as any other of it.

use super::Outcome;

/// What becomes of a signed request's signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signature {
    /// Verify it: the request may be a bot's.
    Verify,
    /// Leave it unverified: the request is anonymous (`$pow_shield_bot`
    /// empty).
    Skip,
}

/// Before the decision: `anonymous` is the client key the request has as
/// if it were unsigned; `blocked` says whether this node knows that key's
/// breaker to be open without asking a store (the zone in local mode, the
/// blocks Redis reported in cluster mode), and is asked only when it
/// matters. An exempt client, and a dry run (which blocks no one), verify.
pub fn before_decision(
    anonymous: &[u8],
    dry_run: bool,
    blocked: impl FnOnce(&[u8]) -> bool,
) -> Signature {
    if anonymous.is_empty() || dry_run || !blocked(anonymous) {
        Signature::Verify
    } else {
        Signature::Skip
    }
}

/// After the decision (the variable read for a header or a log line, the
/// key not needing it): a blocked or banned request is not verified.
pub fn after_decision(outcome: Option<Outcome>) -> Signature {
    match outcome {
        Some(Outcome::Blocked | Outcome::Banned) => Signature::Skip,
        _ => Signature::Verify,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_request_is_verified_unless_its_anonymous_client_is_blocked() {
        let blocked = |key: &[u8]| key == b"198.51.100.7";
        for (anonymous, dry_run, expected) in [
            (&b"198.51.100.7"[..], false, Signature::Skip),
            (b"198.51.100.8", false, Signature::Verify),
            // a dry run blocks no one: its bots are known as ever
            (b"198.51.100.7", true, Signature::Verify),
            // exempt as anonymous: nothing to block
            (b"", false, Signature::Verify),
        ] {
            assert_eq!(
                before_decision(anonymous, dry_run, blocked),
                expected,
                "{anonymous:?} dry_run={dry_run}"
            );
        }
    }

    #[test]
    fn the_breaker_is_not_looked_up_for_an_exempt_client_or_a_dry_run() {
        let never = |_: &[u8]| -> bool { panic!("looked up") };
        assert_eq!(before_decision(b"", false, never), Signature::Verify);
        assert_eq!(before_decision(b"k", true, never), Signature::Verify);
    }

    #[test]
    fn after_a_block_or_ban_the_signature_is_never_verified() {
        for (outcome, expected) in [
            (Some(Outcome::Blocked), Signature::Skip),
            (Some(Outcome::Banned), Signature::Skip),
            (Some(Outcome::Pass), Signature::Verify),
            (Some(Outcome::Challenge), Signature::Verify),
            (Some(Outcome::Exempt), Signature::Verify),
            (None, Signature::Verify),
        ] {
            assert_eq!(after_decision(outcome), expected, "{outcome:?}");
        }
    }
}

//! Inviting a signature (RFC 9421 §5.1, `Accept-Signature`): where bots'
//! keys are configured, a `429` to a request that carries no signature
//! says what signature would be recognised, so that a crawler holding a
//! key can sign instead of paying (docs/bots.md, "Invited to sign").
//!
//! The request names what the module verifies: `@authority` covered, and
//! the parameters the RFC lets a requester ask for without a value of its
//! own (`created`, `expires`), the algorithm and the tag. `keyid` and
//! `nonce` are left out: in a request for a signature each carries a value
//! the signer must copy (one key, one nonce), and any key of a configured
//! bot will do, with a nonce of the signer's own.
//!
//! The clients' half: [`asks_web_bot_auth`] tells whether a field asks for
//! the signature they make.

use crate::message::TAG;

/// The response header that asks for a signature.
pub const HEADER: &str = "Accept-Signature";

/// The field a `429` carries where it invites a signature.
pub const INVITATION: &str =
    r#"sig1=("@authority");created;expires;alg="ed25519";tag="web-bot-auth""#;

/// Whether a response invites a signature: a `429` challenge, to a request
/// without `Signature-Input`, where bots' keys are configured. A request
/// that signed already (recognised or not) is not asked again, nor are the
/// answers to a solution (`409`, `410`, `422`) or the breaker's.
pub fn invites(bots_configured: bool, status: u16, signed: bool) -> bool {
    bots_configured && status == 429 && !signed
}

/// The components a client's signature covers: `@authority`, and
/// `signature-agent` when it names its key directory.
const SIGNED: [&str; 2] = ["@authority", "signature-agent"];

/// Whether the lines of an `Accept-Signature` field ask for a signature
/// the clients make: a member with `tag="web-bot-auth"`, whose `alg`, if
/// any, is `ed25519`, covering nothing but `@authority` (and
/// `signature-agent`). A field that does not parse asks nothing.
pub fn asks_web_bot_auth(lines: &[&str]) -> bool {
    let text = lines
        .iter()
        .map(|l| l.trim())
        .collect::<Vec<_>>()
        .join(", ");
    let Ok(dict) = sfv::Parser::new(&text).parse_dictionary() else {
        return false;
    };
    dict.iter().any(|(_, entry)| {
        let sfv::ListEntry::InnerList(inner) = entry else {
            return false;
        };
        let param = |name: &str| {
            inner
                .params
                .iter()
                .find(|(k, _)| k.as_str() == name)
                .map(|(_, v)| v)
        };
        let string = |v: Option<&sfv::BareItem>| match v {
            Some(sfv::BareItem::String(s)) => Some(s.as_str().to_owned()),
            _ => None,
        };
        let tagged = string(param("tag")).as_deref() == Some(TAG);
        let alg_ok = param("alg").is_none() || string(param("alg")).as_deref() == Some("ed25519");
        let covered = inner.items.iter().all(|item| match &item.bare_item {
            sfv::BareItem::String(s) => SIGNED.contains(&s.as_str()),
            _ => false,
        });
        tagged && alg_ok && covered
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_429_to_an_unsigned_request_where_bots_are_configured_invites() {
        for (configured, status, signed, invites_it) in [
            (true, 429, false, true),
            (true, 429, true, false),
            (false, 429, false, false),
            (true, 409, false, false),
            (true, 410, false, false),
            (true, 422, false, false),
            (true, 403, false, false),
            (true, 503, false, false),
            (true, 200, false, false),
        ] {
            assert_eq!(
                invites(configured, status, signed),
                invites_it,
                "{configured} {status} {signed}"
            );
        }
    }

    #[test]
    fn the_invitation_asks_for_the_signature_the_clients_make() {
        assert!(asks_web_bot_auth(&[INVITATION]));
        let dict = sfv::Parser::new(INVITATION).parse_dictionary().unwrap();
        assert_eq!(dict.len(), 1);
    }

    #[test]
    fn a_field_asks_for_web_bot_auth_only_with_its_tag_and_components() {
        for (lines, asks) in [
            (&[INVITATION][..], true),
            (&[r#"sig1=("@authority");tag="web-bot-auth""#], true),
            (
                &[r#"a=("@authority" "signature-agent");created;tag="web-bot-auth""#],
                true,
            ),
            (&[r#"sig1=();tag="web-bot-auth""#], true),
            // another member of the same field asks
            (
                &[
                    r#"x=("@method");tag="app""#,
                    r#"y=("@authority");tag="web-bot-auth""#,
                ],
                true,
            ),
            (&[r#"sig1=("@authority");tag="other""#], false),
            (&[r#"sig1=("@authority")"#], false),
            (
                &[r#"sig1=("@authority" "@method");tag="web-bot-auth""#],
                false,
            ),
            (
                &[r#"sig1=("@authority");alg="rsa-pss-sha512";tag="web-bot-auth""#],
                false,
            ),
            (&[r#"sig1="@authority";tag="web-bot-auth""#], false),
            (&[r#"sig1=("@authority";tag="web-bot-auth""#], false),
            (&[""], false),
            (&[], false),
        ] {
            assert_eq!(asks_web_bot_auth(lines), asks, "{lines:?}");
        }
    }
}

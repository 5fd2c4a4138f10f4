//! The bot's side: its private key (a JWK with `d`), the directory it
//! publishes, and the headers of one signed request (`Signature-Input`,
//! `Signature`, and `Signature-Agent` when it names its directory).
//!
//! A signature covers `@authority` (and `signature-agent`, by its
//! Dictionary member, when sent) with the parameters in the draft's order:
//! `created`, `keyid`, `alg`, `expires`, `nonce`, `tag`. The structured
//! fields are `sfv`'s, the Ed25519 signature `ed25519-dalek`'s; the test
//! vectors (tests/vectors.rs) check the bytes against the draft's.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ed25519_dalek::Signer as _;
use sfv::SerializeValue;
use web_bot_auth::keyring::Thumbprintable;
use zeroize::Zeroizing;

use crate::message::TAG;

/// The label of the clients' signatures.
pub const LABEL: &str = "sig1";

/// Why a key could not be read or a request not signed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    #[error("not a private Ed25519 JWK: {0}")]
    Key(String),
    #[error("cannot sign: {0}")]
    Value(String),
    #[error("no random numbers: {0}")]
    Random(String),
}

/// A bot's Ed25519 private key.
pub struct SigningKey {
    key: ed25519_dalek::SigningKey,
    thumbprint: String,
}

impl core::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SigningKey")
            .field("thumbprint", &self.thumbprint)
            .finish_non_exhaustive()
    }
}

#[derive(serde::Deserialize)]
struct PrivateJwk {
    kty: String,
    crv: String,
    d: String,
    x: Option<String>,
}

impl SigningKey {
    /// The key of 32 secret bytes.
    pub fn from_secret(secret: &[u8; 32]) -> SigningKey {
        let key = ed25519_dalek::SigningKey::from_bytes(secret);
        let x = URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes());
        let thumbprint = Thumbprintable::OKP {
            crv: "Ed25519".to_owned(),
            x,
        }
        .b64_thumbprint();
        SigningKey { key, thumbprint }
    }

    /// A new random key.
    pub fn generate() -> Result<SigningKey, SignError> {
        let mut secret = Zeroizing::new([0u8; 32]);
        getrandom::getrandom(&mut secret[..]).map_err(|e| SignError::Random(e.to_string()))?;
        Ok(SigningKey::from_secret(&secret))
    }

    /// A private JWK (`kty` `OKP`, `crv` `Ed25519`, `d`; an `x` given must
    /// be `d`'s public key).
    pub fn from_jwk(text: &str) -> Result<SigningKey, SignError> {
        let jwk: PrivateJwk =
            serde_json::from_str(text).map_err(|e| SignError::Key(e.to_string()))?;
        if jwk.kty != "OKP" || jwk.crv != "Ed25519" {
            return Err(SignError::Key(format!(
                "kty \"{}\", crv \"{}\" (want OKP, Ed25519)",
                jwk.kty, jwk.crv
            )));
        }
        let d_text = Zeroizing::new(jwk.d);
        let d = Zeroizing::new(
            URL_SAFE_NO_PAD
                .decode(d_text.as_bytes())
                .map_err(|e| SignError::Key(format!("\"d\": {e}")))?,
        );
        let secret: Zeroizing<[u8; 32]> = Zeroizing::new(
            d.as_slice()
                .try_into()
                .map_err(|_| SignError::Key("\"d\" is not 32 bytes".to_owned()))?,
        );
        let key = SigningKey::from_secret(&secret);
        if jwk.x.is_some_and(|x| x != key.public_x()) {
            return Err(SignError::Key(
                "\"x\" is not the public key of \"d\"".to_owned(),
            ));
        }
        Ok(key)
    }

    /// The JWK thumbprint (RFC 7638): the `keyid` of its signatures.
    pub fn thumbprint(&self) -> &str {
        &self.thumbprint
    }

    fn public_x(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.key.verifying_key().as_bytes())
    }

    fn public_jwk(&self) -> serde_json::Value {
        serde_json::json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "kid": self.thumbprint,
            "x": self.public_x(),
        })
    }

    /// The private JWK, to keep secret.
    pub fn private_jwk(&self) -> Zeroizing<String> {
        let mut jwk = self.public_jwk();
        jwk["d"] = URL_SAFE_NO_PAD.encode(self.key.as_bytes()).into();
        Zeroizing::new(format!("{jwk:#}\n"))
    }

    /// The key directory to publish: a JWK Set of the public key.
    pub fn directory(&self) -> String {
        format!("{:#}\n", serde_json::json!({ "keys": [self.public_jwk()] }))
    }
}

/// The headers of one signed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signed {
    pub signature_input: String,
    pub signature: String,
    /// `Signature-Agent`, when the signature names the bot's directory.
    pub signature_agent: Option<String>,
}

impl Signed {
    /// The headers as (name, value) pairs, in the order to send them.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut h = Vec::with_capacity(3);
        if let Some(agent) = &self.signature_agent {
            h.push(("Signature-Agent", agent.clone()));
        }
        h.push(("Signature-Input", self.signature_input.clone()));
        h.push(("Signature", self.signature.clone()));
        h
    }
}

/// What one signature says.
#[derive(Clone, Debug)]
pub struct Params<'a> {
    /// The request's `@authority` (host, and port unless the default).
    pub authority: &'a str,
    /// The bot's key directory URL, sent as `Signature-Agent`.
    pub signature_agent: Option<&'a str>,
    pub created: i64,
    pub expires: i64,
    pub nonce: &'a str,
}

fn string(s: &str) -> Result<sfv::BareItem, SignError> {
    sfv::String::from_string(s.to_owned())
        .map(sfv::BareItem::String)
        .map_err(|(e, _)| SignError::Value(format!("{s:?}: {e}")))
}

fn key(k: &str) -> Result<sfv::Key, SignError> {
    sfv::Key::from_string(k.to_owned()).map_err(|(e, _)| SignError::Value(format!("{k:?}: {e}")))
}

fn integer(v: i64) -> Result<sfv::BareItem, SignError> {
    sfv::Integer::try_from(v)
        .map(sfv::BareItem::Integer)
        .map_err(|e| SignError::Value(format!("{v}: {e}")))
}

fn dictionary(label: &str, entry: sfv::ListEntry) -> Result<String, SignError> {
    let mut d = sfv::Dictionary::new();
    d.insert(key(label)?, entry);
    d.serialize_value()
        .ok_or_else(|| SignError::Value("an empty dictionary".to_owned()))
}

impl SigningKey {
    /// Signs a request as `p` says, under label `label`.
    pub fn sign_as(&self, label: &str, p: &Params) -> Result<Signed, SignError> {
        let mut items = vec![sfv::Item::new(string("@authority")?)];
        let mut lines = vec![(items[0].serialize_value(), p.authority.to_owned())];
        let agent = match p.signature_agent {
            Some(url) => {
                let mut params = sfv::Parameters::new();
                params.insert(key("key")?, string(label)?);
                let item = sfv::Item::with_params(string("signature-agent")?, params);
                let member = sfv::Item::new(string(url)?);
                lines.push((item.serialize_value(), member.serialize_value()));
                items.push(item);
                Some(dictionary(label, sfv::ListEntry::Item(member))?)
            }
            None => None,
        };
        let mut params = sfv::Parameters::new();
        params.insert(key("created")?, integer(p.created)?);
        params.insert(key("keyid")?, string(&self.thumbprint)?);
        params.insert(key("alg")?, string("ed25519")?);
        params.insert(key("expires")?, integer(p.expires)?);
        params.insert(key("nonce")?, string(p.nonce)?);
        params.insert(key("tag")?, string(TAG)?);
        let inner = sfv::ListEntry::InnerList(sfv::InnerList::with_params(items, params));
        let signature_params = vec![inner.clone()]
            .serialize_value()
            .ok_or_else(|| SignError::Value("no components".to_owned()))?;
        let mut base = String::new();
        for (name, value) in &lines {
            base.push_str(&format!("{name}: {value}\n"));
        }
        base.push_str(&format!("\"@signature-params\": {signature_params}"));
        if !base.is_ascii() {
            return Err(SignError::Value("a covered value is not ASCII".to_owned()));
        }
        let signature = self.key.sign(base.as_bytes()).to_bytes().to_vec();
        let signature =
            sfv::ListEntry::Item(sfv::Item::new(sfv::BareItem::ByteSequence(signature)));
        Ok(Signed {
            signature_input: dictionary(label, inner)?,
            signature: dictionary(label, signature)?,
            signature_agent: agent,
        })
    }

    /// Signs a request to `authority` now (`now`, epoch seconds) for
    /// `lifetime` seconds, with a random nonce.
    pub fn sign(
        &self,
        authority: &str,
        signature_agent: Option<&str>,
        now: i64,
        lifetime: i64,
    ) -> Result<Signed, SignError> {
        let nonce = random_nonce()?;
        self.sign_as(
            LABEL,
            &Params {
                authority,
                signature_agent,
                created: now,
                expires: now.saturating_add(lifetime),
                nonce: &nonce,
            },
        )
    }
}

/// A fresh nonce: 32 random bytes, base64 (the draft's examples' form).
pub fn random_nonce() -> Result<String, SignError> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).map_err(|e| SignError::Random(e.to_string()))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// `@authority` of a URL: its host, and its port unless the scheme's
/// default, lower-case (RFC 9421 §2.2.3). `None`: not an http(s) URL.
pub fn authority_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => "80",
        "https" => "443",
        _ => return None,
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host_port = &rest[..end];
    let host_port = host_port.rsplit_once('@').map_or(host_port, |(_, h)| h);
    let host_port = host_port.to_ascii_lowercase();
    let trimmed = match host_port.rsplit_once(':') {
        Some((host, port)) if port == default_port && !host.ends_with(':') => host.to_owned(),
        _ => host_port,
    };
    (!trimmed.is_empty()).then_some(trimmed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{KeySet, Registry};
    use crate::message::Fixed;
    use crate::verify::verify;

    #[test]
    fn a_key_made_signs_requests_its_directory_verifies() {
        let key = SigningKey::generate().unwrap();
        let mut registry = Registry::default();
        registry
            .add("mybot", &KeySet::parse(&key.directory()).unwrap())
            .unwrap();
        let again = SigningKey::from_jwk(&key.private_jwk()).unwrap();
        assert_eq!(again.thumbprint(), key.thumbprint());
        let signed = again
            .sign("api.example", Some("https://bot.example/keys"), 1_000, 60)
            .unwrap();
        let mut fields: Vec<(&str, &str)> = Vec::new();
        let headers = signed.headers();
        for (k, v) in &headers {
            fields.push((k, v));
        }
        let got = verify(&Fixed::get("api.example", &fields), &registry, 1_010).unwrap();
        assert_eq!((got.bot, got.expires), (0, 1_060));
        assert_eq!(got.keyid, key.thumbprint());
    }

    #[test]
    fn a_public_jwk_or_a_mismatched_x_is_no_signing_key() {
        let key = SigningKey::generate().unwrap();
        assert!(SigningKey::from_jwk(&key.directory()).is_err());
        let other = SigningKey::generate().unwrap();
        let mut jwk: serde_json::Value = serde_json::from_str(&key.private_jwk()).unwrap();
        jwk["x"] = other.public_x().into();
        assert!(SigningKey::from_jwk(&jwk.to_string()).is_err());
    }

    #[test]
    fn authority_is_the_host_and_a_port_other_than_the_default() {
        assert_eq!(
            authority_of("https://API.example/x").as_deref(),
            Some("api.example")
        );
        assert_eq!(authority_of("http://h:80/").as_deref(), Some("h"));
        assert_eq!(authority_of("http://h:8080?q").as_deref(), Some("h:8080"));
        assert_eq!(authority_of("https://u:p@h:443").as_deref(), Some("h"));
        assert_eq!(
            authority_of("http://[::1]:8080/").as_deref(),
            Some("[::1]:8080")
        );
        assert_eq!(authority_of("ftp://h/"), None);
    }
}

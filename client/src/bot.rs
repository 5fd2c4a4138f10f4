//! Signing as a known bot (Web Bot Auth, docs/bots.md): every request
//! sent, each retry too, carries a fresh RFC 9421 signature of the bot's
//! Ed25519 key (`Signature-Input`, `Signature`, and `Signature-Agent` when
//! the bot names its key directory), so that a pow-shield server with the
//! bot's keys (`pow_shield_bot_keys`) sets `$pow_shield_bot` for it.
//!
//! A signer [`BotSigner::when_asked`] stays anonymous until an origin asks
//! for a Web Bot Auth signature (a `429` with `Accept-Signature`, RFC 9421
//! §5.1): that request is sent again once, signed, and every later one to
//! the origin is signed.
//!
//! ```no_run
//! use pow_shield_client::blocking::Client;
//! use pow_shield_client::{BotSigner, Policy};
//! let jwk = std::fs::read_to_string("mybot.jwk")?;
//! let signer = BotSigner::from_jwk(&jwk)?
//!     .signature_agent("https://mybot.example/.well-known/http-message-signatures-directory");
//! let client = Client::new(Policy::default()).sign_with(signer);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use pow_shield_bots::accept::asks_web_bot_auth;
pub use pow_shield_bots::SigningKey;
use pow_shield_bots::{authority_of, DEFAULT_LIFETIME_S};

use crate::Error;

/// Signs requests with a bot's key.
#[derive(Debug)]
pub struct BotSigner {
    key: SigningKey,
    signature_agent: Option<String>,
    lifetime_s: i64,
    /// `Some` when it signs only where asked: the origins that asked.
    asked: Option<Mutex<HashSet<String>>>,
}

/// The header names a signature sets (a caller's own are replaced).
const SIGNATURE_HEADERS: [&str; 3] = ["signature-input", "signature", "signature-agent"];

impl BotSigner {
    /// Signs with `key`, each signature good for 60 s.
    pub fn new(key: SigningKey) -> BotSigner {
        BotSigner {
            key,
            signature_agent: None,
            lifetime_s: DEFAULT_LIFETIME_S,
            asked: None,
        }
    }

    /// Signs only where asked: requests go out unsigned until an answer
    /// of their origin asks for a Web Bot Auth signature
    /// (`Accept-Signature`); from then on that origin's are signed.
    pub fn when_asked(mut self) -> BotSigner {
        self.asked = Some(Mutex::default());
        self
    }

    /// Whether a request to `url` is signed: always, or once its origin
    /// asked ([`BotSigner::when_asked`]).
    pub fn signs(&self, url: &str) -> bool {
        match (&self.asked, origin(url)) {
            (None, _) => true,
            (Some(asked), Some(origin)) => lock(asked).contains(&origin),
            (Some(_), None) => false,
        }
    }

    /// Takes note of an answer's `Accept-Signature` lines from `url`'s
    /// origin: true when they ask for the signature this signer makes and
    /// it was not signing there (a signer that always signs never is
    /// asked).
    pub fn asked(&self, url: &str, accept_signature: &[&str]) -> bool {
        let (Some(asked), Some(origin)) = (&self.asked, origin(url)) else {
            return false;
        };
        asks_web_bot_auth(accept_signature) && lock(asked).insert(origin)
    }

    /// Signs with the private JWK `text` (`pow-shield bot-key new` writes one).
    pub fn from_jwk(text: &str) -> Result<BotSigner, Error> {
        SigningKey::from_jwk(text)
            .map(BotSigner::new)
            .map_err(|e| Error::Request(format!("signing key: {e}")))
    }

    /// Names the bot's key directory in `Signature-Agent` (signed too).
    pub fn signature_agent(mut self, url: &str) -> BotSigner {
        self.signature_agent = Some(url.to_owned());
        self
    }

    /// How long each signature is good for (1 s to 1 h).
    pub fn lifetime(mut self, seconds: i64) -> BotSigner {
        self.lifetime_s = seconds.clamp(1, pow_shield_bots::MAX_LIFETIME_S);
        self
    }

    /// The key's `keyid` (its JWK thumbprint).
    pub fn keyid(&self) -> &str {
        self.key.thumbprint()
    }

    /// Fresh signature headers for a request to `url`, now.
    pub fn headers(&self, url: &str) -> Result<Vec<(String, String)>, Error> {
        let authority =
            authority_of(url).ok_or_else(|| Error::Request(format!("cannot sign {url}")))?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let signed = self
            .key
            .sign(
                &authority,
                self.signature_agent.as_deref(),
                now,
                self.lifetime_s,
            )
            .map_err(|e| Error::Request(e.to_string()))?;
        Ok(signed
            .headers()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect())
    }

    /// `headers` with this request's signature in place of any the caller
    /// gave.
    pub fn sign_into(&self, url: &str, headers: &mut Vec<(String, String)>) -> Result<(), Error> {
        headers.retain(|(k, _)| !SIGNATURE_HEADERS.iter().any(|s| k.eq_ignore_ascii_case(s)));
        headers.extend(self.headers(url)?);
        Ok(())
    }
}

/// The origin a signature is asked for: scheme and `@authority`.
fn origin(url: &str) -> Option<String> {
    let scheme = url.split_once("://")?.0.to_ascii_lowercase();
    Some(format!("{scheme}://{}", authority_of(url)?))
}

fn lock(set: &Mutex<HashSet<String>>) -> std::sync::MutexGuard<'_, HashSet<String>> {
    // A set of names stays whole whatever a panicking holder did.
    set.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pow_shield_bots::message::Fixed;
    use pow_shield_bots::{verify, KeySet, Registry};

    #[test]
    fn each_request_gets_its_own_signature_the_server_verifies() {
        let key = SigningKey::generate().unwrap();
        let mut registry = Registry::default();
        registry
            .add("mybot", &KeySet::parse(&key.directory()).unwrap())
            .unwrap();
        let signer = BotSigner::new(key).signature_agent("https://mybot.example/keys");
        let mut headers = vec![
            ("Accept".to_owned(), "*/*".to_owned()),
            ("signature".to_owned(), "stale".to_owned()),
        ];
        signer
            .sign_into("http://API.example:8080/x?y", &mut headers)
            .unwrap();
        assert_eq!(headers.len(), 4, "{headers:?}");
        let fields: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let m = Fixed::get("api.example:8080", &fields);
        let first = verify(&m, &registry, now).unwrap();
        let again = signer.headers("http://api.example:8080/").unwrap();
        assert_ne!(
            again.iter().find(|(k, _)| k == "Signature-Input"),
            headers.iter().find(|(k, _)| k == "Signature-Input"),
            "a new nonce every time"
        );
        assert_eq!(first.bot, 0);
    }

    #[test]
    fn a_signer_when_asked_signs_an_origin_once_it_asked() {
        let always = BotSigner::new(SigningKey::generate().unwrap());
        assert!(always.signs("http://a.example/"));
        assert!(!always.asked("http://a.example/", &[pow_shield_bots::accept::INVITATION]));

        let asked = BotSigner::new(SigningKey::generate().unwrap()).when_asked();
        let invitation = [pow_shield_bots::accept::INVITATION];
        for (url, lines, newly) in [
            (
                "http://a.example/x",
                &[r#"sig1=("@authority");tag="other""#][..],
                false,
            ),
            ("http://a.example/x", &invitation[..], true),
            ("http://A.example:80/y", &invitation[..], false),
            ("https://a.example/", &invitation[..], true),
            ("ftp://a.example/", &invitation[..], false),
        ] {
            assert_eq!(asked.asked(url, lines), newly, "{url} {lines:?}");
        }
        for (url, signs) in [
            ("http://a.example/z", true),
            ("http://a.example:8080/", false),
            ("https://a.example/", true),
            ("http://b.example/", false),
        ] {
            assert_eq!(asked.signs(url), signs, "{url}");
        }
    }

    #[test]
    fn a_url_without_an_authority_cannot_be_signed() {
        let signer = BotSigner::new(SigningKey::generate().unwrap());
        assert!(signer.headers("file:///etc/passwd").is_err());
    }
}

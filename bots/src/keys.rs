//! A bot's key directory as a file (a JWK Set, `{"keys": [...]}`, as the
//! bot serves it at `/.well-known/http-message-signatures-directory`), and
//! the keys of every configured bot in one [`Registry`].
//!
//! A key is known by its JWK thumbprint (RFC 7638), which is the `keyid` a
//! signature names. Only Ed25519 keys (`kty` `OKP`, `crv` `Ed25519`) can
//! verify; keys of other types in a directory are skipped, but a file with
//! no Ed25519 key, a broken one, or one that holds a private key is
//! refused, with the line it is on.

use std::collections::HashMap;

use serde::Deserialize;
use web_bot_auth::keyring::{Algorithm, KeyRing, Thumbprintable};

/// Names a configuration may give bots (`pow_shield_bot_keys <name>`):
/// each is a label of the metrics and, through `$pow_shield_bot`, often a
/// limit's key.
pub const MAX_BOTS: usize = 32;

/// The longest bot name.
pub const MAX_NAME_LEN: usize = 64;

/// Why a key file was refused; `line` (1-based) is where, when known.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
pub struct KeyFileError {
    pub line: Option<usize>,
    pub message: String,
}

impl KeyFileError {
    fn at(text: &str, needle: &str, message: impl Into<String>) -> Self {
        KeyFileError {
            line: line_of(text, needle),
            message: message.into(),
        }
    }
}

/// The 1-based line of the first `needle` in `text`.
fn line_of(text: &str, needle: &str) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    text.find(needle)
        .map(|at| text[..at].bytes().filter(|&b| b == b'\n').count() + 1)
}

/// One Ed25519 public key of a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BotKey {
    /// Its JWK thumbprint (RFC 7638), base64url: the `keyid` of its
    /// signatures.
    pub thumbprint: String,
    /// The raw 32-byte public key.
    pub public: Vec<u8>,
}

/// The Ed25519 keys of one key directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySet {
    pub keys: Vec<BotKey>,
    /// Keys of other types the directory holds (not usable here).
    pub skipped: usize,
}

/// A JWK as a directory holds it: only the members read here.
#[derive(Deserialize)]
struct Jwk {
    kty: Option<String>,
    crv: Option<String>,
    x: Option<String>,
    d: Option<String>,
}

#[derive(Deserialize)]
struct JwkSet {
    keys: Vec<serde_json::Value>,
}

impl KeySet {
    /// Reads a JWK Set (the text of a key file).
    pub fn parse(text: &str) -> Result<KeySet, KeyFileError> {
        let set: JwkSet = serde_json::from_str(text).map_err(|e| KeyFileError {
            line: (e.line() > 0).then_some(e.line()),
            message: match e.classify() {
                serde_json::error::Category::Data => {
                    format!("not a JWK Set ({{\"keys\": [...]}}): {e}")
                }
                _ => format!("not JSON: {e}"),
            },
        })?;
        let mut keys = Vec::new();
        let mut skipped = 0;
        for (i, value) in set.keys.into_iter().enumerate() {
            let n = i + 1;
            let jwk: Jwk = serde_json::from_value(value).map_err(|e| KeyFileError {
                line: line_of(text, "\"keys\""),
                message: format!("key {n}: {e}"),
            })?;
            if jwk.kty.as_deref() != Some("OKP") || jwk.crv.as_deref() != Some("Ed25519") {
                skipped += 1;
                continue;
            }
            let Some(x) = jwk.x else {
                return Err(KeyFileError::at(
                    text,
                    "\"keys\"",
                    format!("key {n}: an Ed25519 key without \"x\""),
                ));
            };
            if let Some(d) = jwk.d.as_deref() {
                return Err(KeyFileError::at(
                    text,
                    d,
                    format!(
                        "key {n} holds a private key (\"d\"): a key file holds public keys only"
                    ),
                ));
            }
            let jwk = Thumbprintable::OKP {
                crv: "Ed25519".to_owned(),
                x: x.clone(),
            };
            let public = jwk.public_key().map_err(|e| {
                KeyFileError::at(
                    text,
                    &x,
                    format!("key {n}: \"x\" is no Ed25519 public key ({e:?})"),
                )
            })?;
            keys.push(BotKey {
                thumbprint: jwk.b64_thumbprint(),
                public,
            });
        }
        if keys.is_empty() {
            return Err(KeyFileError::at(
                text,
                "\"keys\"",
                "no Ed25519 key (kty \"OKP\", crv \"Ed25519\") in the set",
            ));
        }
        Ok(KeySet { keys, skipped })
    }
}

/// Why a bot's keys could not join a configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("a bot name is 1 to {MAX_NAME_LEN} of A-Z a-z 0-9 . _ -")]
    BadName,
    #[error("at most {MAX_BOTS} bot names")]
    TooMany,
    #[error("key {thumbprint} is already a key of bot \"{other}\"")]
    KeyOfAnother { thumbprint: String, other: String },
}

/// The keys of every configured bot, by thumbprint. Read at configuration
/// time only; the request path looks keys up.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    ring: KeyRing,
    /// Thumbprint → index into `names`.
    owners: HashMap<String, usize>,
    names: Vec<String>,
}

impl Registry {
    /// Adds the keys of bot `name` (a name met before gets more keys).
    pub fn add(&mut self, name: &str, set: &KeySet) -> Result<(), RegistryError> {
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if name.is_empty() || name.len() > MAX_NAME_LEN || !name.chars().all(valid) {
            return Err(RegistryError::BadName);
        }
        let index = match self.names.iter().position(|n| n == name) {
            Some(i) => i,
            None if self.names.len() >= MAX_BOTS => return Err(RegistryError::TooMany),
            None => self.names.len(),
        };
        for key in &set.keys {
            match self.owners.get(&key.thumbprint) {
                Some(&owner) if owner == index => continue,
                Some(&owner) => {
                    return Err(RegistryError::KeyOfAnother {
                        thumbprint: key.thumbprint.clone(),
                        other: self.names.get(owner).cloned().unwrap_or_default(),
                    })
                }
                None => {}
            }
        }
        if index == self.names.len() {
            self.names.push(name.to_owned());
        }
        for key in &set.keys {
            if self.ring.import_raw(
                key.thumbprint.clone(),
                Algorithm::Ed25519,
                key.public.clone(),
            ) {
                self.owners.insert(key.thumbprint.clone(), index);
            }
        }
        Ok(())
    }

    /// The bots' names, in the order first configured.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The bot whose key has thumbprint `keyid`, by index into `names`.
    pub fn owner(&self, keyid: &str) -> Option<usize> {
        self.owners.get(keyid).copied()
    }

    pub(crate) fn ring(&self) -> &KeyRing {
        &self.ring
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9421 B.1.4's test key (the draft's examples sign with it).
    const RFC_KEY_X: &str = "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs";
    const RFC_KEY_THUMBPRINT: &str = "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";

    fn set(keys: &str) -> String {
        format!("{{\n  \"keys\": [\n{keys}\n  ]\n}}\n")
    }

    #[test]
    fn a_key_is_known_by_its_rfc_7638_thumbprint() {
        let text = set(&format!(
            r#"    {{"kty": "OKP", "crv": "Ed25519", "x": "{RFC_KEY_X}"}}"#
        ));
        let keys = KeySet::parse(&text).unwrap();
        assert_eq!(keys.keys.len(), 1);
        assert_eq!(keys.keys[0].thumbprint, RFC_KEY_THUMBPRINT);
        assert_eq!(keys.keys[0].public.len(), 32);
    }

    #[test]
    fn keys_of_other_types_are_skipped_but_one_ed25519_key_is_needed() {
        let rsa = r#"    {"kty": "RSA", "e": "AQAB", "n": "r4tm"}"#;
        let both = set(&format!(
            "{rsa},\n    {{\"kty\": \"OKP\", \"crv\": \"Ed25519\", \"x\": \"{RFC_KEY_X}\"}}"
        ));
        let keys = KeySet::parse(&both).unwrap();
        assert_eq!((keys.keys.len(), keys.skipped), (1, 1));
        let err = KeySet::parse(&set(rsa)).unwrap_err();
        assert!(err.message.contains("no Ed25519 key"), "{err}");
        assert_eq!(err.line, Some(2));
    }

    #[test]
    fn a_broken_file_is_refused_with_its_line() {
        let err = KeySet::parse("{\n  \"keys\": [\n    {\"kty\": \"OKP\",,}\n  ]\n}").unwrap_err();
        assert_eq!(err.line, Some(3));
        assert!(err.to_string().starts_with("line 3: not JSON"), "{err}");
        let err = KeySet::parse("{\n \"kys\": []\n}").unwrap_err();
        assert!(err.message.contains("not a JWK Set"), "{err}");
    }

    #[test]
    fn a_bad_public_key_is_refused_on_its_line() {
        let text = set(&format!(
            "    {{\"kty\": \"OKP\", \"crv\": \"Ed25519\", \"x\": \"{RFC_KEY_X}\"}},\n    {{\"kty\": \"OKP\", \"crv\": \"Ed25519\", \"x\": \"c2hvcnQ\"}}"
        ));
        let err = KeySet::parse(&text).unwrap_err();
        assert_eq!(err.line, Some(4), "{err}");
        assert!(err.message.starts_with("key 2:"), "{err}");
    }

    #[test]
    fn a_private_key_is_refused() {
        let text = set(&format!(
            r#"    {{"kty": "OKP", "crv": "Ed25519", "x": "{RFC_KEY_X}", "d": "n4Ni-HpISpVObnQMW0wOhCKROaIKqKtW_2ZYb2p9KcU"}}"#
        ));
        let err = KeySet::parse(&text).unwrap_err();
        assert!(err.message.contains("private key"), "{err}");
        assert_eq!(err.line, Some(3));
    }

    #[test]
    fn one_key_belongs_to_one_bot_and_names_are_labels() {
        let keys = KeySet::parse(&set(&format!(
            r#"{{"kty": "OKP", "crv": "Ed25519", "x": "{RFC_KEY_X}"}}"#
        )))
        .unwrap();
        let mut registry = Registry::default();
        registry.add("examplebot", &keys).unwrap();
        registry.add("examplebot", &keys).unwrap();
        assert_eq!(registry.owner(RFC_KEY_THUMBPRINT), Some(0));
        assert!(matches!(
            registry.add("other", &keys),
            Err(RegistryError::KeyOfAnother { .. })
        ));
        assert_eq!(registry.names(), ["examplebot"]);
        for bad in ["", "a b", "bot\"", &"x".repeat(65)] {
            assert_eq!(registry.add(bad, &keys), Err(RegistryError::BadName));
        }
    }
}

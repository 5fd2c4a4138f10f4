//! Web Bot Auth for pow-shield (docs/bots.md): known crawlers sign their
//! requests with HTTP Message Signatures (RFC 9421, `tag="web-bot-auth"`,
//! draft-meunier-web-bot-auth-architecture) and publish their public keys
//! as a JWK Set (their key directory).
//!
//! Pure, no nginx types, for the module and the clients alike:
//! - [`keys`]: a key directory's file read into [`keys::KeySet`], the
//!   bots of a configuration in one [`keys::Registry`];
//! - [`message`]: what a verifier reads of a request ([`message::Message`])
//!   and the rules of a signature's tag and times;
//! - [`verify`]: one request's signature checked against the registry at a
//!   given time: a bot's name, or why it stays anonymous;
//! - [`sign`]: a bot's private key ([`sign::SigningKey`]) and the three
//!   headers of a signed request;
//! - [`accept`]: the `Accept-Signature` a `429` invites a signature with,
//!   and whether a field asks for the signature the clients make.
//!
//! The signature handling and the keys are Cloudflare's `web-bot-auth`
//! crate's (with `ed25519-dalek` and `sfv` beneath it): nothing here is
//! cryptography of our own.

pub mod accept;
pub mod keys;
pub mod message;
pub mod sign;
pub mod verify;

pub use keys::{KeyFileError, KeySet, Registry, RegistryError};
pub use message::{Message, CLOCK_ALLOWANCE_S, DEFAULT_LIFETIME_S, MAX_LIFETIME_S, TAG};
pub use sign::{authority_of, Params, SignError, Signed, SigningKey};
pub use verify::{verify, Anonymous, Verified};

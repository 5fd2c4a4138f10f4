//! pow-shield's protocol (docs/protocol.md): stateless HMAC-signed challenge
//! tokens, the SHA-256 work check and search, verification in the documented
//! order, and the responses a client reads (`wire`). No nginx types and no
//! clock: callers pass `now_ms` (epoch milliseconds). The module and the
//! clients both build on this crate.
#![forbid(unsafe_code)]

mod keys;
mod token;
mod verify;
pub mod wire;
mod work;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod vectors;

pub use keys::{KeyError, RandomError, Secret, SecretKeys, MIN_SECRET_LEN};
pub use token::{
    issue_challenge, issue_challenge_in, issue_challenge_with_salt, read_unverified, Challenge,
    TokenInfo, MAX_PAYLOAD_LEN, SALT_LEN,
};
pub use verify::{verify_solution, Rejection, Solved, FUTURE_SKEW_MS};
pub use work::{is_valid_nonce, meets_difficulty, solve, MAX_NONCE_DIGITS};

/// Easiest difficulty a challenge may carry (docs/directives.md).
pub const MIN_DIFFICULTY: u8 = 1;

/// Hardest difficulty a challenge may carry (docs/directives.md).
pub const MAX_DIFFICULTY: u8 = 12;

/// `error` text when the replay store finds the token already used (docs/protocol.md).
pub const SPENT_MESSAGE: &str = "Challenge already spent";

/// Status when the replay store finds the token already used (docs/protocol.md).
pub const SPENT_STATUS: u16 = 409;

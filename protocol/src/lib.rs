//! pow-shield's protocol (docs/protocol.md): stateless HMAC-signed challenge
//! tokens, the SHA-256 work check and search, verification in the documented
//! order, and the responses a client reads (`wire`). No nginx types and no
//! clock: callers pass `now_ms` (epoch milliseconds). The module and the
//! clients both build on this crate.
// Denied, not forbidden: search/shani.rs (the SHA-NI engine) allows it for
// its intrinsics, and nothing else may.
#![deny(unsafe_code)]

mod algorithm;
mod binding;
#[cfg(feature = "equix")]
mod equix_work;
mod keys;
mod search;
mod token;
mod verify;
pub mod wire;
mod work;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod vectors;

pub use algorithm::{
    decode_solution, encode_solution, proves, Proof, Work, EQUIX_SOLUTION_B64_LEN,
    EQUIX_SOLUTION_LEN,
};
pub use binding::{client_id, policy_id, Binding, Expected};
#[cfg(feature = "equix")]
pub use equix_work::{solution_hash, solve_equix, EquixSolver};
pub use keys::{forget_random, KeyError, RandomError, Secret, SecretKeys, MIN_SECRET_LEN};
pub use search::{Engine, Search, SOLVER_ENV};
pub use token::{
    issue_bound_challenge, issue_challenge, issue_challenge_bits, issue_challenge_bits_in,
    issue_challenge_bits_with_salt, issue_challenge_with_salt, read_unverified, sent_ahead,
    Challenge, Strike, TokenInfo, MAX_PAYLOAD_LEN, SALT_LEN,
};
pub use verify::{verify_bound, verify_paid, verify_solution, Rejection, Solved, FUTURE_SKEW_MS};
pub use work::{
    is_valid_nonce, leading_zero_bits, meets_bits, meets_difficulty, solve, solve_bits,
    MAX_NONCE_DIGITS,
};

/// Easiest difficulty a challenge may carry (docs/directives.md).
pub const MIN_DIFFICULTY: u8 = 1;

/// Hardest difficulty a challenge may carry (docs/directives.md).
pub const MAX_DIFFICULTY: u8 = 12;

/// Fewest leading zero bits a challenge may ask for (docs/protocol.md §4).
pub const MIN_BITS: u8 = 1;

/// Most leading zero bits a challenge may ask for: 12 hex digits.
pub const MAX_BITS: u8 = 4 * MAX_DIFFICULTY;

/// The `difficulty` (leading hex zeros) a token carries beside `bits`:
/// `⌈bits / 4⌉`, the fewest hex zeros that prove `bits` zero bits, so a
/// client that only knows hex digits over-pays by at most ×8.
pub const fn hex_digits_for_bits(bits: u8) -> u8 {
    bits.div_ceil(4)
}

/// `error` text when the replay store finds the token already used (docs/protocol.md).
pub const SPENT_MESSAGE: &str = "Challenge already spent";

/// Status when the replay store finds the token already used (docs/protocol.md).
pub const SPENT_STATUS: u16 = 409;

//! What a client reads (docs/protocol.md §3, §7): header names, the JSON
//! bodies and the fixed texts. The module writes its responses with these
//! types and clients parse them with the same ones, so the two cannot drift.

use serde::{Deserialize, Serialize};

/// Request and response header carrying the signed token.
pub const HEADER_CHALLENGE: &str = "X-PoW-Challenge";
/// Request header carrying the solution.
pub const HEADER_NONCE: &str = "X-PoW-Nonce";
/// Response header carrying the challenge's difficulty in hex digits.
pub const HEADER_DIFFICULTY: &str = "X-PoW-Difficulty";
/// Response header carrying the challenge's exact price, leading zero bits.
pub const HEADER_BITS: &str = "X-PoW-Bits";
/// Response header of the circuit breaker's answer: [`SHIELD_BLOCKED`] or
/// [`SHIELD_BANNED`].
pub const HEADER_SHIELD: &str = "X-PoW-Shield";

/// `X-PoW-Shield` value while the circuit breaker is open.
pub const SHIELD_BLOCKED: &str = "blocked";
/// `X-PoW-Shield` value while the client is banned.
pub const SHIELD_BANNED: &str = "banned";

/// Status of a plain challenge.
pub const CHALLENGE_STATUS: u16 = 429;
/// `error` text of a plain challenge (429).
pub const CHALLENGE_MESSAGE: &str = "PoW challenge required";
/// The only `algorithm` there is.
pub const ALGORITHM: &str = "sha256";
/// Body of the circuit breaker's answer (plain text).
pub const BLOCKED_BODY: &str = "Blocked by Circuit Breaker";
/// `error` text of the 503 while the store is unavailable.
pub const UNAVAILABLE_MESSAGE: &str = "Rate limiter unavailable";
/// Status while the store is unavailable (with `Retry-After`).
pub const UNAVAILABLE_STATUS: u16 = 503;

/// The JSON body of a challenge: 429, and the 409/410/422 answers that
/// carry a fresh challenge. Fields in the order of docs/protocol.md §3.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChallengeBody {
    /// [`CHALLENGE_MESSAGE`], or why the solution was refused.
    pub error: String,
    /// The signed token, as in `X-PoW-Challenge`.
    pub challenge: String,
    /// Leading hex zeros that certainly pay: `⌈bits / 4⌉`.
    pub difficulty: u8,
    /// Leading zero bits required; absent from servers that predate it
    /// (then `4 × difficulty`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bits: Option<u8>,
    /// The salt the nonce is appended to (hex text, hashed as text).
    pub salt: String,
    /// Always [`ALGORITHM`].
    pub algorithm: String,
    /// Seconds the challenge stays valid.
    pub expires_in: u64,
    /// How to solve it, for humans.
    pub instructions: String,
}

impl ChallengeBody {
    /// The body for a challenge; `error` is None for a plain 429.
    pub fn new(
        error: Option<&str>,
        token: &str,
        salt: &str,
        difficulty: u8,
        expires_in: u64,
    ) -> ChallengeBody {
        ChallengeBody {
            error: error.unwrap_or(CHALLENGE_MESSAGE).to_owned(),
            challenge: token.to_owned(),
            difficulty,
            bits: None,
            salt: salt.to_owned(),
            algorithm: ALGORITHM.to_owned(),
            expires_in,
            instructions: instructions(difficulty),
        }
    }

    /// The same body asking for exactly `bits` leading zero bits (its
    /// `difficulty` stays the hex digits that prove them).
    pub fn with_bits(mut self, bits: u8) -> ChallengeBody {
        self.bits = Some(bits);
        self.instructions = instructions_bits(bits, self.difficulty);
        self
    }

    /// The leading zero bits this challenge asks for: `bits`, else
    /// `4 × difficulty` (a server that predates `bits`).
    pub fn required_bits(&self) -> u8 {
        self.bits
            .unwrap_or_else(|| self.difficulty.saturating_mul(4))
    }

    /// Compact JSON, as sent.
    pub fn to_json(&self) -> String {
        // Strings and integers always serialise.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The JSON body of every other refusal: `{"error": "..."}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// One of the texts of docs/protocol.md §7.
    pub error: String,
}

impl ErrorBody {
    /// Compact JSON, as sent.
    pub fn json(message: &str) -> String {
        let body = ErrorBody {
            error: message.to_owned(),
        };
        serde_json::to_string(&body).unwrap_or_default()
    }
}

/// The `instructions` text of a challenge body.
pub fn instructions(difficulty: u8) -> String {
    format!(
        "Find a decimal nonce such that the lower-case hex SHA-256 of salt followed by nonce \
         starts with {difficulty} '0' characters, then repeat the request with the headers \
         X-PoW-Challenge: <challenge> and X-PoW-Nonce: <nonce>. Each solution admits one request."
    )
}

/// The `instructions` text of a challenge priced in bits.
pub fn instructions_bits(bits: u8, difficulty: u8) -> String {
    format!(
        "Find a decimal nonce such that the SHA-256 of salt followed by nonce starts with {bits} \
         zero bits (a lower-case hex digest starting with {difficulty} '0' characters always \
         does), then repeat the request with the headers X-PoW-Challenge: <challenge> and \
         X-PoW-Nonce: <nonce>. Each solution admits one request."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenge_body_serialises_fields_in_spec_order() {
        let json = ChallengeBody::new(None, "t.m", "ab", 4, 60).to_json();
        assert!(json.starts_with(
            r#"{"error":"PoW challenge required","challenge":"t.m","difficulty":4,"salt":"ab","algorithm":"sha256","expires_in":60,"instructions":"Find a decimal nonce"#
        ));
    }

    #[test]
    fn a_bits_body_has_bits_after_difficulty() {
        let body = ChallengeBody::new(None, "t.m", "ab", 5, 60).with_bits(18);
        assert!(body
            .to_json()
            .contains(r#""difficulty":5,"bits":18,"salt":"ab""#));
        assert!(body.instructions.contains("18 zero bits"));
        assert_eq!(body.required_bits(), 18);
    }

    #[test]
    fn a_body_without_bits_asks_four_bits_per_hex_digit() {
        let old = r#"{"error":"PoW challenge required","challenge":"t.m","difficulty":4,"salt":"ab","algorithm":"sha256","expires_in":60,"instructions":"x"}"#;
        let parsed: ChallengeBody = serde_json::from_str(old).unwrap();
        assert_eq!((parsed.bits, parsed.required_bits()), (None, 16));
    }

    #[test]
    fn challenge_body_parses_back() {
        let body = ChallengeBody::new(Some("Challenge expired"), "t.m", "ab", 4, 60);
        let parsed: ChallengeBody = serde_json::from_str(&body.to_json()).unwrap();
        assert_eq!(parsed, body);
    }

    #[test]
    fn error_body_is_one_field() {
        assert_eq!(
            ErrorBody::json(UNAVAILABLE_MESSAGE),
            r#"{"error":"Rate limiter unavailable"}"#
        );
    }
}

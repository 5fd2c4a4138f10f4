//! What a client reads (docs/protocol.md §3, §7): header names, the JSON
//! bodies and the fixed texts. The module writes its responses with these
//! types and clients parse them with the same ones, so the two cannot drift.
//!
//! Every JSON body is an RFC 9457 problem details object (`type`, `title`,
//! `status`, `detail`) that also keeps the fields clients read since the
//! first version (`error`, and a challenge's `challenge`, `difficulty`,
//! `salt`, `algorithm`, `expires_in`, `instructions`). Its media type is
//! [`PROBLEM_JSON`] when the request's `Accept` asks for it, else [`JSON`]
//! ([`media_type`]).

use serde::{Deserialize, Serialize};

mod json;
pub(crate) use json::escaped;
pub use json::{decimal, push_hex, ChallengeJson};

/// Request and response header carrying the signed token.
pub const HEADER_CHALLENGE: &str = "X-PoW-Challenge";
/// Request header carrying the solution.
pub const HEADER_NONCE: &str = "X-PoW-Nonce";
/// Request header carrying an Equi-X solution (16 bytes, unpadded
/// base64url) beside `X-PoW-Nonce`.
pub const HEADER_SOLUTION: &str = "X-PoW-Solution";
/// Response header naming the algorithm of the challenge it comes with
/// (the 429's and the one sent ahead), when it is not SHA-256.
pub const HEADER_ALGORITHM: &str = "X-PoW-Algorithm";
/// Response header carrying the challenge's difficulty in hex digits.
pub const HEADER_DIFFICULTY: &str = "X-PoW-Difficulty";
/// Response header carrying the challenge's exact price, leading zero bits.
pub const HEADER_BITS: &str = "X-PoW-Bits";
/// Response header carrying the next challenge ahead of need (SPEC §4,
/// "Paying ahead"): on a response after which the client has no free
/// request left, and on every response to a paid request.
pub const HEADER_NEXT_CHALLENGE: &str = "X-PoW-Next-Challenge";
/// The next challenge's price, leading zero bits.
pub const HEADER_NEXT_BITS: &str = "X-PoW-Next-Bits";
/// The next challenge's difficulty in hex digits.
pub const HEADER_NEXT_DIFFICULTY: &str = "X-PoW-Next-Difficulty";
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
/// The `algorithm` of a SHA-256 challenge (the default).
pub const ALGORITHM: &str = "sha256";
/// Body of the circuit breaker's answer (plain text).
pub const BLOCKED_BODY: &str = "Blocked by Circuit Breaker";
/// `error` text of the 503 while the store is unavailable.
pub const UNAVAILABLE_MESSAGE: &str = "Rate limiter unavailable";
/// Status while the store is unavailable (with `Retry-After`).
pub const UNAVAILABLE_STATUS: u16 = 503;

/// `Content-Type` of a JSON body for a client that did not ask for
/// problem details.
pub const JSON: &str = "application/json";
/// `Content-Type` of a JSON body for a client whose `Accept` names it
/// (RFC 9457 §3).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The problem types of draft-ietf-httpapi-ratelimit-headers (§ Problem
/// Types), registered at IANA's HTTP Problem Types registry.
pub const TYPE_QUOTA_EXCEEDED: &str =
    "https://iana.org/assignments/http-problem-types#quota-exceeded";
/// The store that counts requests is down: nothing the client did.
pub const TYPE_TEMPORARY_REDUCED_CAPACITY: &str =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

/// One kind of problem: its `error` text (the key clients used before
/// problem details), status, `type` URI and `detail`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The `error` text, also the `title` (one title per type).
    pub error: &'static str,
    /// The HTTP status it is sent with.
    pub status: u16,
    /// The `type` URI: the draft's for a quota or capacity problem, a
    /// `tag:` URI (RFC 4151, not meant to be dereferenced) for pow-shield's
    /// own verification failures.
    pub uri: &'static str,
    /// What the client should do, for humans.
    pub detail: &'static str,
}

/// Every problem the module answers with JSON (docs/protocol.md §7), in
/// the order of its verification table.
pub const PROBLEMS: [Problem; 11] = [
    Problem {
        error: CHALLENGE_MESSAGE,
        status: CHALLENGE_STATUS,
        uri: TYPE_QUOTA_EXCEEDED,
        detail: "Over the rate limit: solve the proof-of-work challenge and repeat the request \
                 with X-PoW-Challenge and X-PoW-Nonce, or wait Retry-After seconds.",
    },
    Problem {
        error: "Malformed challenge token",
        status: 400,
        uri: "tag:pow-shield,2026:malformed-challenge",
        detail: "Send X-PoW-Challenge and X-PoW-Nonce together, the token unchanged; \
                 repeat the request without them to get a new challenge.",
    },
    Problem {
        error: "Invalid challenge signature",
        status: 403,
        uri: "tag:pow-shield,2026:invalid-signature",
        detail: "The token was not issued by this server; \
                 repeat the request without X-PoW-* headers to get a new challenge.",
    },
    Problem {
        error: "Invalid payload encoding",
        status: 400,
        uri: "tag:pow-shield,2026:invalid-payload",
        detail: "The token's payload cannot be read; \
                 repeat the request without X-PoW-* headers to get a new challenge.",
    },
    Problem {
        error: "Challenge was not issued for this IP",
        status: 403,
        uri: "tag:pow-shield,2026:wrong-address",
        detail: "Send a solution from the address that received the challenge; \
                 repeat the request without X-PoW-* headers to get a new challenge.",
    },
    Problem {
        error: "Challenge was not issued for this client",
        status: 403,
        uri: "tag:pow-shield,2026:wrong-client",
        detail: "The token was issued to another client key; \
                 solve the fresh challenge in this response and repeat the request with it.",
    },
    Problem {
        error: "Challenge was issued for another location",
        status: 409,
        uri: "tag:pow-shield,2026:wrong-policy",
        detail: "The token was issued where another price holds (another location's limits \
                 or difficulty): solve the fresh challenge in this response and repeat the \
                 request with it.",
    },
    Problem {
        error: "Challenge expired",
        status: 410,
        uri: "tag:pow-shield,2026:challenge-expired",
        detail: "Solve the fresh challenge in this response and repeat the request with it.",
    },
    Problem {
        error: "Incorrect PoW solution",
        status: 422,
        uri: "tag:pow-shield,2026:incorrect-solution",
        detail: "The nonce does not meet the difficulty (the challenge is not spent): \
                 solve the fresh challenge in this response and repeat the request with it.",
    },
    Problem {
        error: crate::SPENT_MESSAGE,
        status: crate::SPENT_STATUS,
        uri: "tag:pow-shield,2026:challenge-spent",
        detail: "Each solution admits one request: \
                 solve the fresh challenge in this response and repeat the request with it.",
    },
    Problem {
        error: UNAVAILABLE_MESSAGE,
        status: UNAVAILABLE_STATUS,
        uri: TYPE_TEMPORARY_REDUCED_CAPACITY,
        detail: "The server cannot count requests now (not the client's fault): \
                 wait Retry-After seconds and repeat the request, without solving anything.",
    },
];

impl Problem {
    /// The problem whose `error` text is `error`; an unknown text (none the
    /// module sends) is `about:blank` with status 400.
    pub fn of(error: &str) -> Problem {
        PROBLEMS
            .iter()
            .find(|p| p.error == error)
            .copied()
            .unwrap_or(Problem {
                error: "Bad Request",
                status: 400,
                uri: "about:blank",
                detail: "",
            })
    }
}

/// The `Content-Type` for a JSON body: [`PROBLEM_JSON`] when the request's
/// `Accept` (all of its header lines, in order) names
/// `application/problem+json` with a q-value above 0, else [`JSON`], so a
/// client written before problem details gets the type it always got.
pub fn media_type<'a>(accept: impl IntoIterator<Item = &'a [u8]>) -> &'static str {
    let asks = |range: &[u8]| {
        let mut parts = range.split(|b| *b == b';');
        let name = parts.next().unwrap_or_default().trim_ascii();
        if !name.eq_ignore_ascii_case(PROBLEM_JSON.as_bytes()) {
            return false;
        }
        // `q=0` refuses the type (RFC 9110 §12.4.2); any other q accepts it.
        !parts.any(|p| {
            let p = p.trim_ascii();
            p.len() >= 2
                && p[..2].eq_ignore_ascii_case(b"q=")
                && p[2..].iter().all(|b| matches!(b, b'0' | b'.'))
        })
    };
    if accept
        .into_iter()
        .any(|line| line.split(|b| *b == b',').any(asks))
    {
        PROBLEM_JSON
    } else {
        JSON
    }
}

/// The RFC 9457 members every JSON body starts with. Optional when
/// parsing, so a server that predates them is still read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProblemMembers {
    /// The problem type URI ([`Problem::uri`]).
    #[serde(rename = "type", default)]
    pub problem_type: String,
    /// The problem type's title: the same text as `error`.
    #[serde(default)]
    pub title: String,
    /// The response's status.
    #[serde(default)]
    pub status: u16,
    /// What to do, for humans.
    #[serde(default)]
    pub detail: String,
}

impl ProblemMembers {
    fn of(problem: &Problem) -> ProblemMembers {
        ProblemMembers {
            problem_type: problem.uri.to_owned(),
            title: problem.error.to_owned(),
            status: problem.status,
            detail: problem.detail.to_owned(),
        }
    }
}

/// The JSON body of a challenge: 429, and the 409/410/422 answers that
/// carry a fresh challenge. The problem details members first, then the
/// fields in the order of docs/protocol.md §3.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChallengeBody {
    /// `type`, `title`, `status`, `detail`.
    #[serde(flatten)]
    pub problem: ProblemMembers,
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
    /// [`ALGORITHM`], or `equix` ([`crate::Work::name`]).
    pub algorithm: String,
    /// Seconds the challenge stays valid.
    pub expires_in: u64,
    /// How to solve it, for humans.
    pub instructions: String,
    /// The location's strike threshold (`pow_shield_strikes <n>`): its
    /// `n`-th strike opens the breaker, so a client keeps at most `n - 1`
    /// unpaid requests in flight over the limit. Absent where the breaker
    /// is off, and from servers that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strike_threshold: Option<u32>,
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
        let problem = Problem::of(error.unwrap_or(CHALLENGE_MESSAGE));
        ChallengeBody {
            problem: ProblemMembers::of(&problem),
            error: problem.error.to_owned(),
            challenge: token.to_owned(),
            difficulty,
            bits: None,
            salt: salt.to_owned(),
            algorithm: ALGORITHM.to_owned(),
            expires_in,
            instructions: instructions(difficulty),
            strike_threshold: None,
        }
    }

    /// The same body advertising the location's strike threshold (`None`:
    /// the breaker is off).
    pub fn with_strike_threshold(mut self, threshold: Option<u32>) -> ChallengeBody {
        self.strike_threshold = threshold;
        self
    }

    /// The same body asking for exactly `bits` leading zero bits (its
    /// `difficulty` stays the hex digits that prove them).
    pub fn with_bits(mut self, bits: u8) -> ChallengeBody {
        self.bits = Some(bits);
        self.instructions = instructions_bits(bits, self.difficulty);
        self
    }

    /// The same body for another algorithm: its name and instructions.
    pub fn with_work(mut self, work: crate::Work) -> ChallengeBody {
        if work == crate::Work::Equix {
            self.algorithm = work.name().to_owned();
            self.instructions = instructions_equix(self.required_bits());
        }
        self
    }

    /// The algorithm it names; `None` for one this version does not know.
    pub fn work(&self) -> Option<crate::Work> {
        crate::Work::from_name(&self.algorithm)
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

/// The JSON body of every other refusal: the problem details members and
/// `error`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// `type`, `title`, `status`, `detail`.
    #[serde(flatten)]
    pub problem: ProblemMembers,
    /// One of the texts of docs/protocol.md §7.
    pub error: String,
}

impl ErrorBody {
    /// Compact JSON, as sent.
    pub fn json(message: &str) -> String {
        let problem = Problem::of(message);
        let body = ErrorBody {
            problem: ProblemMembers {
                title: message.to_owned(),
                ..ProblemMembers::of(&problem)
            },
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

/// The `instructions` text of a challenge priced in bits: these pieces
/// around the bits and the hex digits.
pub(crate) const INSTRUCTIONS_BITS: [&str; 3] = [
    "Find a decimal nonce such that the SHA-256 of salt followed by nonce starts with ",
    " zero bits (a lower-case hex digest starting with ",
    " '0' characters always does), then repeat the request with the headers \
     X-PoW-Challenge: <challenge> and X-PoW-Nonce: <nonce>. Each solution admits one request.",
];

/// The `instructions` text of an Equi-X challenge: these pieces around the
/// bits.
pub(crate) const INSTRUCTIONS_EQUIX: [&str; 2] = [
    "Find a decimal nonce and an Equi-X solution for the challenge string salt followed by \
     nonce such that the SHA-256 of salt, nonce and the 16 solution bytes starts with ",
    " zero bits, then repeat the request with the headers X-PoW-Challenge: <challenge>, \
     X-PoW-Nonce: <nonce> and X-PoW-Solution: <solution, base64url>. Each solution admits \
     one request.",
];

/// The `instructions` text of a challenge priced in bits.
pub fn instructions_bits(bits: u8, difficulty: u8) -> String {
    let [a, b, c] = INSTRUCTIONS_BITS;
    format!("{a}{bits}{b}{difficulty}{c}")
}

/// The `instructions` text of an Equi-X challenge.
pub fn instructions_equix(bits: u8) -> String {
    let [a, b] = INSTRUCTIONS_EQUIX;
    format!("{a}{bits}{b}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_equix_body_names_its_algorithm_and_how_to_pay() {
        let body = ChallengeBody::new(None, "t.m", "ab", 1, 60)
            .with_bits(4)
            .with_work(crate::Work::Equix);
        assert!(body.to_json().contains(r#""algorithm":"equix""#));
        assert!(body.instructions.contains("X-PoW-Solution"));
        assert_eq!(body.work(), Some(crate::Work::Equix));
        let sha = ChallengeBody::new(None, "t.m", "ab", 1, 60).with_work(crate::Work::Sha256);
        assert_eq!(sha, ChallengeBody::new(None, "t.m", "ab", 1, 60));
    }

    use crate::Rejection;

    #[test]
    fn challenge_body_is_a_problem_then_the_fields_in_spec_order() {
        let json = ChallengeBody::new(None, "t.m", "ab", 4, 60).to_json();
        assert!(
            json.starts_with(
                r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"PoW challenge required","status":429,"detail":"Over the rate limit: "#
            ),
            "{json}"
        );
        assert!(json.contains(
            r#"","error":"PoW challenge required","challenge":"t.m","difficulty":4,"salt":"ab","algorithm":"sha256","expires_in":60,"instructions":"Find a decimal nonce"#
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
    fn the_strike_threshold_comes_last_and_only_where_the_breaker_is_on() {
        let body = ChallengeBody::new(None, "t.m", "ab", 4, 60).with_bits(16);
        assert!(!body.to_json().contains("strike_threshold"));
        let json = body.with_strike_threshold(Some(5)).to_json();
        assert!(
            json.ends_with(r#"Each solution admits one request.","strike_threshold":5}"#),
            "{json}"
        );
        let parsed: ChallengeBody = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed.strike_threshold, Some(5));
    }

    #[test]
    fn a_body_without_bits_asks_four_bits_per_hex_digit() {
        let old = r#"{"error":"PoW challenge required","challenge":"t.m","difficulty":4,"salt":"ab","algorithm":"sha256","expires_in":60,"instructions":"x"}"#;
        let parsed: ChallengeBody = serde_json::from_str(old).unwrap();
        assert_eq!((parsed.bits, parsed.required_bits()), (None, 16));
    }

    #[test]
    fn a_refused_solutions_body_carries_its_own_status_and_type() {
        for (error, status, uri) in [
            (
                "Challenge expired",
                410,
                "tag:pow-shield,2026:challenge-expired",
            ),
            (
                "Incorrect PoW solution",
                422,
                "tag:pow-shield,2026:incorrect-solution",
            ),
            (
                crate::SPENT_MESSAGE,
                409,
                "tag:pow-shield,2026:challenge-spent",
            ),
        ] {
            let body = ChallengeBody::new(Some(error), "t.m", "ab", 4, 60);
            let p = &body.problem;
            assert_eq!(
                (p.status, p.problem_type.as_str(), p.title.as_str()),
                (status, uri, error)
            );
        }
    }

    #[test]
    fn every_rejection_has_a_problem_with_its_status() {
        for r in [
            Rejection::Malformed,
            Rejection::BadSignature,
            Rejection::BadPayload,
            Rejection::WrongIp,
            Rejection::Expired,
            Rejection::WrongSolution,
        ] {
            let p = Problem::of(r.message());
            assert_eq!((p.error, p.status), (r.message(), r.status()));
            assert!(p.uri.starts_with("tag:pow-shield,2026:"), "{p:?}");
        }
        let uris: std::collections::HashSet<_> = PROBLEMS.iter().map(|p| p.uri).collect();
        assert_eq!(uris.len(), PROBLEMS.len(), "one type per problem");
    }

    #[test]
    fn a_body_without_the_problem_members_is_still_read() {
        let old = r#"{"error":"Challenge expired","challenge":"t.m","difficulty":2,"salt":"ab","algorithm":"sha256","expires_in":60,"instructions":"x"}"#;
        let body: ChallengeBody = serde_json::from_str(old).unwrap();
        assert_eq!((body.problem.status, body.difficulty), (0, 2));
    }

    #[test]
    fn problem_json_only_when_accept_names_it() {
        let of = |lines: &[&str]| media_type(lines.iter().map(|l| l.as_bytes()));
        assert_eq!(of(&[]), JSON);
        assert_eq!(of(&["*/*"]), JSON);
        assert_eq!(of(&["application/json"]), JSON);
        assert_eq!(of(&["application/problem+json"]), PROBLEM_JSON);
        assert_eq!(
            of(&["text/html, Application/Problem+JSON;q=0.9"]),
            PROBLEM_JSON
        );
        assert_eq!(of(&["text/html", "application/problem+json"]), PROBLEM_JSON);
        assert_eq!(of(&["application/problem+json;q=0"]), JSON);
        assert_eq!(of(&["application/problem+json; q=0.000"]), JSON);
        assert_eq!(of(&["application/problem+jsonx"]), JSON);
    }

    #[test]
    fn challenge_body_parses_back() {
        let body = ChallengeBody::new(Some("Challenge expired"), "t.m", "ab", 4, 60);
        let parsed: ChallengeBody = serde_json::from_str(&body.to_json()).unwrap();
        assert_eq!(parsed, body);
    }

    #[test]
    fn error_body_is_a_problem_with_the_error_text() {
        assert_eq!(
            ErrorBody::json(UNAVAILABLE_MESSAGE),
            r#"{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity","title":"Rate limiter unavailable","status":503,"detail":"The server cannot count requests now (not the client's fault): wait Retry-After seconds and repeat the request, without solving anything.","error":"Rate limiter unavailable"}"#
        );
        let parsed: ErrorBody =
            serde_json::from_str(&ErrorBody::json("Malformed challenge token")).unwrap();
        assert_eq!(
            (parsed.problem.status, parsed.problem.title.as_str()),
            (400, "Malformed challenge token")
        );
    }
}

//! What a response means to a paying client (docs/protocol.md §7, §8).

use std::time::{Duration, SystemTime};

use pow_shield_protocol::wire::{self, ChallengeBody};
use pow_shield_protocol::{hex_digits_for_bits, read_unverified, Work, MAX_BITS};

use crate::{http_date, Error};

/// A challenge to pay: a 429, or a 409/410/422 with a fresh one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// The response's status.
    pub status: u16,
    /// The signed token, sent back as `X-PoW-Challenge`.
    pub token: String,
    /// The salt the nonce is appended to.
    pub salt: String,
    /// Leading hex zeros that certainly pay: `⌈bits / 4⌉`.
    pub difficulty: u8,
    /// Leading zero bits required: what a solver searches for.
    pub bits: u8,
    /// What pays it: the token's `alg` (`X-PoW-Algorithm`, the body's
    /// `algorithm` when the token can't be read).
    pub work: Work,
    /// `Retry-After`, when the response had one (delay-seconds, or the
    /// time left until its HTTP date).
    pub retry_after: Option<Duration>,
}

/// How a client should read one response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Not the shield's business: hand it to the caller.
    Pass,
    /// Pay (or wait) and retry.
    Challenge(Challenge),
    /// The store is unavailable (503); `Retry-After` says when to try again.
    Unavailable {
        /// `Retry-After`, when present.
        retry_after: Option<Duration>,
    },
    /// Refused outright ([`Error::Blocked`], [`Error::Banned`]) or a
    /// challenge that cannot be read ([`Error::BadChallenge`]).
    Refused(Error),
}

/// Statuses that come with a challenge (docs/protocol.md §3, §7.2).
const CHALLENGE_STATUSES: [u16; 4] = [429, 409, 410, 422];

/// Whether a response with this status may carry a challenge; only then can
/// [`read_answer`] need the body (when the token header is missing).
pub fn may_be_challenge(status: u16) -> bool {
    CHALLENGE_STATUSES.contains(&status)
}

/// Reads a response: `header` looks a header up by name (any case), `body`
/// gives the token when the challenge header is missing, and the salt and
/// difficulty when the token's payload can't be read. The salt and
/// difficulty are read from the token itself (what the server will check);
/// the body's copies are the fallback.
pub fn read_answer<'h>(
    status: u16,
    header: impl Fn(&str) -> Option<&'h str>,
    body: Option<&[u8]>,
) -> Answer {
    match header(wire::HEADER_SHIELD).map(str::trim) {
        Some(wire::SHIELD_BANNED) => return Answer::Refused(Error::Banned { status }),
        Some(wire::SHIELD_BLOCKED) => return Answer::Refused(Error::Blocked { status }),
        _ => {}
    }
    let retry_after = header("Retry-After").and_then(|v| parse_retry_after(v, SystemTime::now()));
    if status == wire::UNAVAILABLE_STATUS {
        return Answer::Unavailable { retry_after };
    }
    if !may_be_challenge(status) {
        return Answer::Pass;
    }
    let parsed_body: Option<ChallengeBody> = body.and_then(|b| serde_json::from_slice(b).ok());
    let token = match header(wire::HEADER_CHALLENGE) {
        Some(t) => t.trim().to_owned(),
        None => match &parsed_body {
            Some(b) => b.challenge.clone(),
            // An application's own 409/422, or a 429 from something else.
            None => return Answer::Pass,
        },
    };
    // A token is sent back in a header: one that can't be (a hostile body's
    // CR/LF, spaces) is refused before any work is spent on it.
    if token.is_empty() || !token.bytes().all(is_token_byte) {
        return Answer::Refused(Error::BadChallenge(format!(
            "HTTP {status}: a {} token that can't be sent back",
            wire::HEADER_CHALLENGE
        )));
    }
    let header_number = |name| header(name).and_then(|d| d.trim().parse::<u8>().ok());
    // The price in bits: X-PoW-Bits, else (a server that predates bits)
    // four per hex digit of X-PoW-Difficulty.
    let header_bits = header_number(wire::HEADER_BITS)
        .or_else(|| header_number(wire::HEADER_DIFFICULTY).map(|d| d.saturating_mul(4)));
    let named = header(wire::HEADER_ALGORITHM).map(|a| (a.trim(), Work::from_name(a.trim())));
    let (salt, bits, work) = match (read_unverified(&token), parsed_body) {
        (Some(info), _) => (info.salt, info.bits, Some(info.work)),
        (None, Some(b)) => {
            let bits = b.required_bits();
            let work = b.work();
            (b.salt, bits, work)
        }
        (None, None) => {
            return Answer::Refused(Error::BadChallenge(format!(
                "HTTP {status}: the {} token has no readable payload",
                wire::HEADER_CHALLENGE
            )))
        }
    };
    let work = match (work, named) {
        (Some(work), _) => work,
        (None, Some((_, Some(work)))) => work,
        (None, named) => {
            let name = named.map_or("?", |(name, _)| name);
            return Answer::Refused(Error::BadChallenge(format!(
                "HTTP {status}: an unknown proof-of-work algorithm {name:?}"
            )));
        }
    };
    // The server may require more than the token says (a location's
    // minimum); its header says so.
    let bits = bits.max(header_bits.unwrap_or(0));
    if salt.is_empty() || bits > MAX_BITS {
        return Answer::Refused(Error::BadChallenge(format!(
            "HTTP {status}: salt {salt:?}, {bits} bits"
        )));
    }
    Answer::Challenge(Challenge {
        status,
        token,
        salt,
        difficulty: hex_digits_for_bits(bits),
        bits,
        work,
        retry_after,
    })
}

/// Tokens are base64url text and one dot (docs/protocol.md, "The token").
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')
}

/// `Retry-After` either as delay-seconds (what the shield sends) or as an
/// HTTP date (what a proxy or application in front may send): the wait
/// from `now`, zero for a date already past.
fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for u64: wait "forever", which no policy accepts.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let when = http_date::parse(value)?;
    let now = now.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    let when = Duration::from_secs(u64::try_from(when).unwrap_or(0));
    Some(when.saturating_sub(now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pow_shield_protocol::{issue_challenge_with_salt, Secret, SecretKeys};

    fn token(difficulty: u8) -> pow_shield_protocol::Challenge {
        let keys = SecretKeys::single(Secret::new(&[b'k'; 32]).unwrap());
        issue_challenge_with_salt(&keys, "127.0.0.1", 1, 60_000, difficulty, [0x5a; 16])
    }

    fn headers<'a>(list: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> + 'a {
        move |name| {
            list.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| *v)
        }
    }

    #[test]
    fn challenge_is_read_from_the_token_header() {
        let c = token(3);
        let answer = read_answer(
            429,
            headers(&[("x-pow-challenge", &c.token), ("Retry-After", "7")]),
            None,
        );
        assert_eq!(
            answer,
            Answer::Challenge(Challenge {
                status: 429,
                token: c.token.clone(),
                salt: c.salt.clone(),
                difficulty: 3,
                bits: 12,
                work: Work::Sha256,
                retry_after: Some(Duration::from_secs(7)),
            })
        );
    }

    #[test]
    fn difficulty_header_above_the_token_wins() {
        let c = token(3);
        let Answer::Challenge(ch) = read_answer(
            422,
            headers(&[("X-PoW-Challenge", &c.token), ("X-PoW-Difficulty", "5")]),
            None,
        ) else {
            panic!("not a challenge")
        };
        assert_eq!((ch.difficulty, ch.bits), (5, 20));
    }

    fn bits_token(bits: u8) -> pow_shield_protocol::Challenge {
        let keys = SecretKeys::single(Secret::new(&[b'k'; 32]).unwrap());
        pow_shield_protocol::issue_challenge_bits_with_salt(
            &keys,
            "127.0.0.1",
            1,
            60_000,
            bits,
            [0x5a; 16],
        )
    }

    #[test]
    fn a_bits_challenge_is_solved_for_its_bits_not_its_hex_digits() {
        let c = bits_token(18);
        let Answer::Challenge(ch) = read_answer(
            429,
            headers(&[
                ("X-PoW-Challenge", &c.token),
                ("X-PoW-Difficulty", "5"),
                ("X-PoW-Bits", "18"),
            ]),
            None,
        ) else {
            panic!("not a challenge")
        };
        assert_eq!((ch.difficulty, ch.bits), (5, 18));
    }

    #[test]
    fn a_bits_header_above_the_token_wins() {
        let c = bits_token(18);
        let Answer::Challenge(ch) = read_answer(
            422,
            headers(&[("X-PoW-Challenge", &c.token), ("X-PoW-Bits", "19")]),
            None,
        ) else {
            panic!("not a challenge")
        };
        assert_eq!((ch.difficulty, ch.bits), (5, 19));
    }

    #[test]
    fn a_body_without_a_readable_token_gives_its_bits() {
        let c = bits_token(18);
        let forged = format!("x{}", c.token);
        let body = ChallengeBody::new(None, &forged, &c.salt, 5, 60)
            .with_bits(18)
            .to_json();
        let Answer::Challenge(ch) = read_answer(429, headers(&[]), Some(body.as_bytes())) else {
            panic!("not a challenge")
        };
        assert_eq!((ch.difficulty, ch.bits), (5, 18));
    }

    #[test]
    fn more_than_48_bits_is_a_bad_challenge() {
        let c = bits_token(18);
        let answer = read_answer(
            429,
            headers(&[("X-PoW-Challenge", &c.token), ("X-PoW-Bits", "49")]),
            None,
        );
        assert!(matches!(answer, Answer::Refused(Error::BadChallenge(_))));
    }

    #[test]
    fn body_is_the_fallback_without_the_header() {
        let c = token(2);
        let body =
            ChallengeBody::new(Some("Challenge expired"), &c.token, &c.salt, 2, 60).to_json();
        let Answer::Challenge(ch) = read_answer(410, headers(&[]), Some(body.as_bytes())) else {
            panic!("not a challenge")
        };
        assert_eq!((ch.status, ch.salt, ch.difficulty), (410, c.salt, 2));
    }

    #[test]
    fn a_body_token_that_cannot_go_back_in_a_header_is_refused_before_solving() {
        let c = token(2);
        let forged = format!("{}\r\nX-Injected: 1", c.token);
        let body = ChallengeBody::new(Some("Challenge expired"), &forged, &c.salt, 2, 60).to_json();
        assert!(matches!(
            read_answer(410, headers(&[]), Some(body.as_bytes())),
            Answer::Refused(Error::BadChallenge(_))
        ));
    }

    /// base64url without padding, for hand-made tokens.
    fn b64url(data: &[u8]) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in data.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
            for i in 0..=chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            }
        }
        out
    }

    /// A token with this payload text (the client never checks the MAC).
    fn forged(payload: &str) -> String {
        format!("{}.{}", b64url(payload.as_bytes()), b64url(&[7; 32]))
    }

    #[test]
    fn the_hand_made_encoding_is_base64url() {
        assert_eq!(b64url(b"f"), "Zg");
        assert_eq!(b64url(b"fo"), "Zm8");
        assert_eq!(b64url(b"foo"), "Zm9v");
        assert_eq!(b64url(&[0xfb, 0xff]), "-_8");
    }

    #[test]
    fn a_payload_with_exp_and_other_new_fields_is_read() {
        // Tokens gain a signed `exp` (and `bits`); unknown fields are ignored.
        let salt = "6c17a261001047c8b3e83591c3269c2e";
        for payload in [
            format!(
                r#"{{"ip":"203.0.113.7","ts":1796034492000,"difficulty":3,"salt":"{salt}","exp":1796034552000}}"#
            ),
            format!(
                r#"{{"ip":"203.0.113.7","ts":1796034492000,"difficulty":3,"salt":"{salt}","exp":1796034552000,"bits":10,"later":{{"a":[1]}}}}"#
            ),
            format!(
                r#"{{"exp":1796034552000,"salt":"{salt}","difficulty":3,"ts":1796034492000,"ip":"::1"}}"#
            ),
        ] {
            let token = forged(&payload);
            let Answer::Challenge(ch) =
                read_answer(429, headers(&[("X-PoW-Challenge", &token)]), None)
            else {
                panic!("not a challenge: {payload}")
            };
            assert_eq!((ch.salt.as_str(), ch.difficulty), (salt, 3), "{payload}");
            assert_eq!(ch.token, token);
        }
    }

    #[test]
    fn a_deeply_nested_body_or_token_is_no_crash() {
        // serde_json stops at 128 levels: a hostile body is not a challenge
        // body, a hostile token not a readable one.
        let deep = "[".repeat(60_000);
        assert_eq!(
            read_answer(429, headers(&[]), Some(deep.as_bytes())),
            Answer::Pass
        );
        for depth in [600, 60_000] {
            let token = forged(&deep[..depth]);
            assert!(matches!(
                read_answer(429, headers(&[("X-PoW-Challenge", &token)]), None),
                Answer::Refused(Error::BadChallenge(_))
            ));
        }
        let real = token(2).token;
        let body = format!(r#"{{"challenge":"{real}","salt":{deep}"#);
        assert_eq!(
            read_answer(429, headers(&[]), Some(body.as_bytes())),
            Answer::Pass
        );
    }

    #[test]
    fn application_409_without_a_challenge_passes() {
        assert_eq!(
            read_answer(409, headers(&[]), Some(b"{\"error\":\"conflict\"}")),
            Answer::Pass
        );
    }

    #[test]
    fn shield_header_means_blocked_or_banned() {
        assert_eq!(
            read_answer(403, headers(&[("X-PoW-Shield", "blocked")]), None),
            Answer::Refused(Error::Blocked { status: 403 })
        );
        assert_eq!(
            read_answer(403, headers(&[("X-PoW-Shield", "banned")]), None),
            Answer::Refused(Error::Banned { status: 403 })
        );
    }

    #[test]
    fn unreadable_token_is_a_bad_challenge() {
        assert!(matches!(
            read_answer(429, headers(&[("X-PoW-Challenge", "garbage")]), None),
            Answer::Refused(Error::BadChallenge(_))
        ));
    }

    #[test]
    fn retry_after_is_delay_seconds_or_an_http_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        let secs = |v| parse_retry_after(v, now);
        assert_eq!(secs(" 7 "), Some(Duration::from_secs(7)));
        assert_eq!(
            secs("Sun, 06 Nov 1994 08:50:07 GMT"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            secs("Sunday, 06-Nov-94 08:50:07 GMT"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            secs("Sun Nov  6 08:50:07 1994"),
            Some(Duration::from_secs(30))
        );
        let later = now + Duration::from_millis(500);
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", later),
            Some(Duration::from_millis(29_500))
        );
    }

    #[test]
    fn retry_after_in_the_past_is_no_wait() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after("Wed, 31 Dec 1969 23:59:59 GMT", now),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn retry_after_that_is_neither_form_is_ignored() {
        let now = SystemTime::now();
        for bad in ["", "soon", "-1", "+5", "1.5", "2024-02-29T00:00:00Z"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn challenge_takes_retry_after_as_an_http_date() {
        let c = token(3);
        let Answer::Challenge(ch) = read_answer(
            429,
            headers(&[
                ("X-PoW-Challenge", &c.token),
                ("Retry-After", "Thu, 01 Jan 1970 00:00:00 GMT"),
            ]),
            None,
        ) else {
            panic!("not a challenge")
        };
        assert_eq!(ch.retry_after, Some(Duration::ZERO));
        assert!(matches!(
            read_answer(503, headers(&[("Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT")]), None),
            Answer::Unavailable { retry_after: Some(d) } if d > Duration::from_secs(86_400 * 365)
        ));
    }

    #[test]
    fn unavailable_carries_retry_after() {
        assert_eq!(
            read_answer(503, headers(&[("Retry-After", "2")]), None),
            Answer::Unavailable {
                retry_after: Some(Duration::from_secs(2))
            }
        );
        assert_eq!(read_answer(200, headers(&[]), None), Answer::Pass);
    }
}

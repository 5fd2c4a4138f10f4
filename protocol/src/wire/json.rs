//! A challenge body written by hand, straight into the caller's buffer:
//! the bytes [`ChallengeBody::to_json`](super::ChallengeBody::to_json)
//! makes, without building the owned body, its strings or serde's
//! character-by-character escaping (a 429 flood writes one per request).

use super::{Problem, INSTRUCTIONS_BITS, INSTRUCTIONS_EQUIX};
use crate::Work;

/// A challenge body (docs/protocol.md §3) over borrowed parts; what a
/// server sends, priced in bits.
#[derive(Clone, Copy, Debug)]
pub struct ChallengeJson<'a> {
    /// The problem: [`Problem::of`] the refusal's text (429: the
    /// challenge's).
    pub problem: Problem,
    /// The signed token.
    pub token: &'a str,
    /// The salt, hex.
    pub salt: &'a str,
    /// Leading hex zeros that certainly pay.
    pub difficulty: u8,
    /// Leading zero bits required.
    pub bits: u8,
    /// What pays it.
    pub work: Work,
    /// Seconds the challenge stays valid.
    pub expires_in: u64,
    /// The location's strike threshold; `None`: the breaker is off.
    pub strike_threshold: Option<u32>,
}

impl ChallengeJson<'_> {
    /// Bytes of the body.
    pub fn len(&self) -> usize {
        let mut len = 0;
        self.emit(&mut |part| len += part.len());
        len
    }

    /// Never empty (a JSON object); here for `len`'s sake.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Where the token starts in the body (it is written unescaped: a
    /// token is base64url and a dot).
    pub fn token_offset(&self) -> usize {
        let mut len = 0;
        self.emit_head(&mut |part| len += part.len());
        len
    }

    /// Writes the body at the start of `buf`; the bytes written, `None`
    /// (nothing to use) when `buf` is shorter than [`len`](Self::len).
    pub fn write_to(&self, buf: &mut [u8]) -> Option<usize> {
        self.write_with_token(buf).map(|(len, _)| len)
    }

    /// [`write_to`](Self::write_to) in one pass, also saying where the
    /// token starts ([`token_offset`](Self::token_offset)).
    pub fn write_with_token(&self, buf: &mut [u8]) -> Option<(usize, usize)> {
        let mut out = Cursor {
            buf,
            at: 0,
            fits: true,
        };
        self.emit_head(&mut |part| out.put(part));
        let token_at = out.at;
        self.emit_tail(&mut |part| out.put(part));
        out.fits.then_some((out.at, token_at))
    }

    /// The body as a vector (tests, and callers without a buffer).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1024);
        self.emit(&mut |part| out.extend_from_slice(part));
        out
    }

    /// Up to the token: the problem members, `error`, `"challenge":"`.
    fn emit_head(&self, put: &mut dyn FnMut(&[u8])) {
        let p = &self.problem;
        put(b"{\"type\":\"");
        escaped(p.uri, put);
        put(b"\",\"title\":\"");
        escaped(p.error, put);
        put(b"\",\"status\":");
        decimal(u64::from(p.status), &mut *put);
        put(b",\"detail\":\"");
        escaped(p.detail, put);
        put(b"\",\"error\":\"");
        escaped(p.error, put);
        put(b"\",\"challenge\":\"");
    }

    fn emit(&self, put: &mut dyn FnMut(&[u8])) {
        self.emit_head(put);
        self.emit_tail(put);
    }

    /// From the token on.
    fn emit_tail(&self, put: &mut dyn FnMut(&[u8])) {
        escaped(self.token, put);
        put(b"\",\"difficulty\":");
        decimal(u64::from(self.difficulty), &mut *put);
        put(b",\"bits\":");
        decimal(u64::from(self.bits), &mut *put);
        put(b",\"salt\":\"");
        escaped(self.salt, put);
        put(b"\",\"algorithm\":\"");
        escaped(self.work.name(), put);
        put(b"\",\"expires_in\":");
        decimal(self.expires_in, &mut *put);
        put(b",\"instructions\":\"");
        let bits = u64::from(self.bits);
        match self.work {
            Work::Sha256 => {
                let [a, b, c] = INSTRUCTIONS_BITS;
                escaped(a, put);
                decimal(bits, &mut *put);
                escaped(b, put);
                decimal(u64::from(self.difficulty), &mut *put);
                escaped(c, put);
            }
            Work::Equix => {
                let [a, b] = INSTRUCTIONS_EQUIX;
                escaped(a, put);
                decimal(bits, &mut *put);
                escaped(b, put);
            }
        }
        put(b"\"");
        if let Some(threshold) = self.strike_threshold {
            put(b",\"strike_threshold\":");
            decimal(u64::from(threshold), &mut *put);
        }
        put(b"}");
    }
}

/// Writes parts one after the other into a buffer; `fits` turns false
/// (and stays) once one does not fit.
struct Cursor<'b> {
    buf: &'b mut [u8],
    at: usize,
    fits: bool,
}

impl Cursor<'_> {
    fn put(&mut self, part: &[u8]) {
        match self.buf.get_mut(self.at..self.at + part.len()) {
            Some(dst) => dst.copy_from_slice(part),
            None => self.fits = false,
        }
        self.at += part.len();
    }
}

/// Appends the lower-case hex of `bytes` (token salts, Redis key tags).
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
}

/// `n` in decimal, its digits handed to `put` at once: made two at a
/// time from the last, in a scratch of the longest (20 digits).
pub fn decimal(mut n: u64, mut put: impl FnMut(&[u8])) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        at -= 2;
        digits[at] = PAIRS[pair];
        digits[at + 1] = PAIRS[pair + 1];
    }
    if n >= 10 {
        let pair = n as usize * 2;
        at -= 2;
        digits[at] = PAIRS[pair];
        digits[at + 1] = PAIRS[pair + 1];
    } else {
        at -= 1;
        digits[at] = b'0' + n as u8;
    }
    put(&digits[at..]);
}

/// `00` to `99`.
const PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// `text` inside a JSON string, escaped as serde_json escapes: `"` and `\`
/// with a backslash, the control characters below 0x20 as `\b \t \n \f \r`
/// or `\u00xx`, everything else as it is. Runs without an escape go out
/// whole.
pub(crate) fn escaped(text: &str, put: &mut dyn FnMut(&[u8])) {
    let bytes = text.as_bytes();
    // Nearly always nothing to escape: one branch-free pass finds out.
    let plain = bytes.iter().fold(true, |plain, &b| {
        plain & (b >= 0x20) & (b != b'"') & (b != b'\\')
    });
    if plain {
        put(bytes);
        return;
    }
    let mut start = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        let short = match byte {
            b'"' => b'"',
            b'\\' => b'\\',
            0x08 => b'b',
            b'\t' => b't',
            b'\n' => b'n',
            0x0c => b'f',
            b'\r' => b'r',
            0x00..=0x1f => b'u',
            _ => continue,
        };
        put(&bytes[start..at]);
        start = at + 1;
        if short == b'u' {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            put(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ]);
        } else {
            put(&[b'\\', short]);
        }
    }
    put(&bytes[start..]);
}

#[cfg(test)]
mod tests {
    use super::super::{ChallengeBody, PROBLEMS};
    use super::*;

    fn owned(j: &ChallengeJson) -> String {
        let error = (j.problem.error != PROBLEMS[0].error).then_some(j.problem.error);
        ChallengeBody::new(error, j.token, j.salt, j.difficulty, j.expires_in)
            .with_bits(j.bits)
            .with_strike_threshold(j.strike_threshold)
            .with_work(j.work)
            .to_json()
    }

    #[test]
    fn the_written_body_is_byte_for_byte_serdes() {
        let base = ChallengeJson {
            problem: PROBLEMS[0],
            token: "eyJpcCI6IjEyNy4wLjAuMSJ9.HKq6MuahMGRU5XVLW7i4vvz519kRNmlh7qTLhXr2wcE",
            salt: "51d3dd2d230d5ddf4425d49e25d39c8b",
            difficulty: 4,
            bits: 16,
            work: Work::Sha256,
            expires_in: 60,
            strike_threshold: None,
        };
        let mut cases = vec![base];
        for problem in PROBLEMS
            .iter()
            .filter(|p| p.status != 400 && p.status != 503)
        {
            cases.push(ChallengeJson {
                problem: *problem,
                ..base
            });
        }
        for (difficulty, bits) in [(1, 1), (3, 9), (12, 48), (0, 0), (255, 255)] {
            cases.push(ChallengeJson {
                difficulty,
                bits,
                ..base
            });
        }
        for work in [Work::Sha256, Work::Equix] {
            for strike_threshold in [None, Some(1), Some(5), Some(u32::MAX)] {
                for expires_in in [0, 1, 60, u64::MAX] {
                    cases.push(ChallengeJson {
                        work,
                        strike_threshold,
                        expires_in,
                        ..base
                    });
                }
            }
        }
        // Whatever a caller passes is escaped as serde escapes it.
        let every: String = (0u8..0x80)
            .map(char::from)
            .chain(['é', '€', '😀'])
            .collect();
        cases.push(ChallengeJson {
            token: &every,
            salt: "a\"b\\c\u{7f}",
            ..base
        });
        for case in &cases {
            let want = owned(case);
            let got = case.to_vec();
            assert_eq!(String::from_utf8_lossy(&got), want, "{case:?}");
            assert_eq!(case.len(), want.len());
            let mut buf = vec![0u8; want.len()];
            assert_eq!(case.write_to(&mut buf), Some(want.len()));
            assert_eq!(buf, want.as_bytes());
            assert_eq!(case.write_to(&mut buf[1..]), None, "too short a buffer");
            assert_eq!(
                case.write_with_token(&mut buf),
                Some((want.len(), case.token_offset()))
            );
        }
    }

    #[test]
    fn decimals_are_rusts() {
        let mut n = 1u64;
        for k in (0..10).chain([99, 100, 101, 999, 1000, u64::MAX - 1, u64::MAX]) {
            for v in [k, n, n.saturating_sub(1)] {
                let mut out = Vec::new();
                decimal(v, |d| out.extend_from_slice(d));
                assert_eq!(String::from_utf8(out).unwrap(), v.to_string());
            }
            n = n.saturating_mul(10);
        }
    }

    #[test]
    fn the_token_is_found_where_the_body_says() {
        let j = ChallengeJson {
            problem: PROBLEMS[0],
            token: "abc.def",
            salt: "00",
            difficulty: 1,
            bits: 4,
            work: Work::Sha256,
            expires_in: 60,
            strike_threshold: Some(3),
        };
        let body = j.to_vec();
        let at = j.token_offset();
        assert_eq!(&body[at..at + 7], b"abc.def");
        assert!(body[..at].ends_with(b"\"challenge\":\""));
    }

    #[test]
    fn the_instructions_read_as_they_always_did() {
        assert_eq!(
            super::super::instructions_bits(16, 4),
            "Find a decimal nonce such that the SHA-256 of salt followed by nonce starts with 16 \
             zero bits (a lower-case hex digest starting with 4 '0' characters always does), then \
             repeat the request with the headers X-PoW-Challenge: <challenge> and X-PoW-Nonce: \
             <nonce>. Each solution admits one request."
        );
        assert_eq!(
            super::super::instructions_equix(9),
            "Find a decimal nonce and an Equi-X solution for the challenge string salt followed by \
             nonce such that the SHA-256 of salt, nonce and the 16 solution bytes starts with 9 \
             zero bits, then repeat the request with the headers X-PoW-Challenge: <challenge>, \
             X-PoW-Nonce: <nonce> and X-PoW-Solution: <solution, base64url>. Each solution \
             admits one request."
        );
    }
}

//! The limit that refused a request, as its rejection line names it
//! (`pow_shield: over the limit, challenge sent: limit=net
//! key=198.51.100.0/24`).

use core::fmt;

use crate::decision::{Final, Outcome};

/// The words naming the limit that refused a request: its `name=` (or
/// the name its numbers give, `10r/s`), and for a limit counted by `key=`
/// the value it counted. A limit counted per client key names no key (the
/// line's `client` is it; a custom client key, an API key, stays out of
/// the log as in the breaker's lines). A value's bytes outside printable
/// ASCII, and `\` and `"`, are written `\xHH`: a header's value cannot
/// forge a line or a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefusedBy<'a> {
    pub name: &'a str,
    /// The limit's `key=` value for this request (`None`: per client key).
    pub key: Option<&'a [u8]>,
}

impl fmt::Display for RefusedBy<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "limit={}", self.name)?;
        let Some(key) = self.key else {
            return Ok(());
        };
        f.write_str(" key=")?;
        for &b in key {
            match b {
                b'\\' | b'"' => write!(f, "\\x{b:02x}")?,
                0x21..=0x7e => write!(f, "{}", char::from(b))?,
                _ => write!(f, "\\x{b:02x}")?,
            }
        }
        Ok(())
    }
}

/// The place, among the location's limits, of the limit that refused a
/// request over it: a challenge, or a failed solution of one over its
/// limit. `None`: no limit refused it (passed, blocked, banned, a trap, an
/// outage).
pub fn refusing_limit(done: &Final) -> Option<usize> {
    match done.outcome {
        Outcome::Challenge | Outcome::Invalid => done
            .verdict
            .filter(|v| !v.allowed)
            .map(|v| usize::from(v.limit)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Answer;
    use crate::limiter::Verdict;

    #[test]
    fn the_words_name_the_limit_and_a_keyed_limits_value() {
        let rows: [(&str, Option<&[u8]>, &str); 5] = [
            (
                "net",
                Some(b"198.51.100.0/24"),
                "limit=net key=198.51.100.0/24",
            ),
            ("site", Some(b"site"), "limit=site key=site"),
            ("10r/s", None, "limit=10r/s"),
            ("asn", Some(b"AS 64500"), "limit=asn key=AS\\x2064500"),
            (
                "tenant",
                Some(b"a\"b\\c\n, client: 1"),
                "limit=tenant key=a\\x22b\\x5cc\\x0a,\\x20client:\\x201",
            ),
        ];
        for (name, key, line) in rows {
            assert_eq!(RefusedBy { name, key }.to_string(), line);
        }
    }

    fn done(outcome: Outcome, verdict: Option<(bool, u8)>) -> Final {
        Final {
            outcome,
            answer: Some(Answer::Unavailable),
            reason: "x",
            verdict: verdict.map(|(allowed, limit)| Verdict {
                allowed,
                limit,
                ..Verdict::default()
            }),
            breaker: None,
            struck: false,
            retry_after_ms: None,
            generation: None,
            pays_back: false,
            next: None,
        }
    }

    #[test]
    fn a_limit_is_named_where_it_refused_the_request() {
        // (outcome, verdict (allowed, limit), the refusing limit)
        let rows = [
            (Outcome::Challenge, Some((false, 1)), Some(1)),
            (Outcome::Invalid, Some((false, 0)), Some(0)),
            (Outcome::Challenge, Some((true, 1)), None),
            (Outcome::Invalid, None, None),
            (Outcome::Blocked, Some((false, 0)), None),
            (Outcome::Banned, None, None),
            (Outcome::Trap, None, None),
            (Outcome::Unavailable, Some((false, 0)), None),
            (Outcome::Pass, Some((true, 0)), None),
        ];
        for (outcome, verdict, limit) in rows {
            assert_eq!(
                refusing_limit(&done(outcome, verdict)),
                limit,
                "{outcome:?}"
            );
        }
    }
}

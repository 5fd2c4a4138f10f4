//! How directive values are written, below every module that reads one
//! (`config`, the Redis URL's options in `redis::url`, the decision): nginx's
//! grammar for times, sizes, whole numbers and keywords; [`ValueError`], the
//! reason a word is refused; and the values a directive names by keyword or
//! writes two ways ([`HeadersMode`], [`FailPolicy`], [`Difficulty`]), which
//! the decision and the module hold as parsed. What each directive's words
//! mean is `config::values`; which word a refusal names, `config::args`.

use core::ops::RangeInclusive;

/// Why a directive value was refused: a short reason, never the value
/// itself (the glue prints that, and it may be a password).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// The value is empty.
    #[error("empty value")]
    Empty,
    /// The value does not have the expected form; the text says which.
    #[error("{0}")]
    Syntax(&'static str),
    /// The value does not fit the type or the bounds; the text gives them.
    #[error("must be {0}")]
    OutOfRange(&'static str),
}

const TIME_SYNTAX: &str = "not a time (examples: 500ms, 30s, 5m, 1h30m)";

/// An nginx time (`ngx_parse_time`) in milliseconds: components with the
/// units `y` (365 d), `M` (30 d), `w`, `d`, `h`, `m`, `s`, `ms`, largest
/// first, each at most once, optionally separated by spaces (`1h30m`,
/// `1h 30m`); a bare final number is seconds (`90` = 90 s, `1m30` = 90 s).
/// `0` is accepted; callers that need a positive time check for it.
pub fn parse_time_ms(s: &str) -> Result<u64, ValueError> {
    // Index of "s" in TIME_UNITS: a bare number is seconds.
    const SECONDS: usize = 6;
    if s.is_empty() {
        return Err(ValueError::Empty);
    }
    let mut rest = s;
    let mut total: u64 = 0;
    // Index into TIME_UNITS of the smallest unit the next component may use.
    let mut next_unit = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (number, tail) = rest.split_at(digits);
        if number.is_empty() {
            return Err(ValueError::Syntax(TIME_SYNTAX));
        }
        let value = parse_decimal(number).ok_or(ValueError::OutOfRange("a shorter time"))?;
        // Longest suffix wins, so "ms" is not read as "m" then "s".
        let unit = TIME_UNITS
            .iter()
            .enumerate()
            .filter(|(_, (suffix, _))| tail.starts_with(suffix))
            .max_by_key(|(_, (suffix, _))| suffix.len());
        let (index, suffix, scale) = match unit {
            Some((index, (suffix, scale))) => (index, *suffix, *scale),
            None if tail.trim_start_matches(' ').is_empty() => (SECONDS, "", 1_000),
            None => return Err(ValueError::Syntax(TIME_SYNTAX)),
        };
        if index < next_unit {
            return Err(ValueError::Syntax(
                "time units must go from largest to smallest, each once",
            ));
        }
        next_unit = index + 1;
        total = value
            .checked_mul(scale)
            .and_then(|ms| total.checked_add(ms))
            .ok_or(ValueError::OutOfRange("a shorter time"))?;
        rest = tail
            .get(suffix.len()..)
            .unwrap_or_default()
            .trim_start_matches(' ');
    }
    Ok(total)
}

/// nginx time units and their length in ms, largest first.
const TIME_UNITS: [(&str, u64); 8] = [
    ("y", 365 * DAY_MS),
    ("M", 30 * DAY_MS),
    ("w", 7 * DAY_MS),
    ("d", DAY_MS),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

const DAY_MS: u64 = 86_400_000;

/// An nginx size (`ngx_parse_size`) in bytes: a number with an optional
/// `k`/`K`, `m`/`M` or `g`/`G` suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<usize, ValueError> {
    let (number, scale) = match s.as_bytes().last() {
        None => return Err(ValueError::Empty),
        Some(b'k' | b'K') => (s.get(..s.len() - 1), 1u64 << 10),
        Some(b'm' | b'M') => (s.get(..s.len() - 1), 1 << 20),
        Some(b'g' | b'G') => (s.get(..s.len() - 1), 1 << 30),
        Some(_) => (Some(s), 1),
    };
    let number = number
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .ok_or(ValueError::Syntax("not a size (examples: 512k, 10m, 1g)"))?;
    parse_decimal(number)
        .and_then(|n| n.checked_mul(scale))
        .and_then(|bytes| usize::try_from(bytes).ok())
        .ok_or(ValueError::OutOfRange("a smaller size"))
}

/// A difficulty as written: `<n>` hex digits or `<n>b` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Difficulty {
    /// Leading zero bits: `4 × n` for hex digits, `n` for bits.
    pub bits: u8,
    /// Written with the `b` suffix.
    pub in_bits: bool,
}

impl Difficulty {
    /// `n` hex digits.
    pub const fn hex(n: u8) -> Difficulty {
        Difficulty {
            bits: 4 * n,
            in_bits: false,
        }
    }

    /// `n` bits.
    pub const fn bits(n: u8) -> Difficulty {
        Difficulty {
            bits: n,
            in_bits: true,
        }
    }
}

/// `pow_shield_headers`: which rate-limit headers to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadersMode {
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset`.
    X,
    /// The IETF draft's `RateLimit` and `RateLimit-Policy`.
    Ietf,
    /// Both sets (the default).
    Both,
    /// None.
    Off,
}

/// `pow_shield_fail`: what to do while Redis is unavailable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailPolicy {
    /// Decide with the shared-memory leaky bucket (the default).
    Local,
    /// Let requests through.
    Open,
    /// Answer 503 with `Retry-After`, except trusted requests.
    Closed,
}

/// Plain ASCII digits (no sign, no spaces) within `bounds`: `Syntax` if
/// not digits, `OutOfRange` if outside the bounds or the type.
pub(crate) fn parse_bounded<T>(
    s: &str,
    bounds: RangeInclusive<T>,
    syntax: &'static str,
    range: &'static str,
) -> Result<T, ValueError>
where
    T: TryFrom<u64> + PartialOrd,
{
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ValueError::Syntax(syntax));
    }
    parse_decimal(s)
        .and_then(|n| T::try_from(n).ok())
        .filter(|n| bounds.contains(n))
        .ok_or(ValueError::OutOfRange(range))
}

/// Plain ASCII digits as a `u64`; `None` if empty, another character
/// (no sign, no spaces) or overflow.
fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.bytes().try_fold(0u64, |acc, b| {
        let digit = char::from(b).to_digit(10)?;
        acc.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// The value paired with `s` (case-insensitive) in `table`.
pub(crate) fn match_keyword<T: Copy>(
    s: &str,
    table: &[(&str, T)],
    expected: &'static str,
) -> Result<T, ValueError> {
    if s.is_empty() {
        return Err(ValueError::Empty);
    }
    table
        .iter()
        .find(|(keyword, _)| keyword.eq_ignore_ascii_case(s))
        .map(|(_, value)| *value)
        .ok_or(ValueError::Syntax(expected))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_every_nginx_unit() {
        let cases = [
            ("500ms", 500),
            ("30s", 30_000),
            ("1m", 60_000),
            ("1h", 3_600_000),
            ("1d", 86_400_000),
            ("1w", 604_800_000),
            ("1M", 2_592_000_000),
            ("1y", 31_536_000_000),
            ("0", 0),
            ("0s", 0),
        ];
        for (text, ms) in cases {
            assert_eq!(parse_time_ms(text), Ok(ms), "{text}");
        }
    }

    #[test]
    fn bare_number_is_seconds() {
        assert_eq!(parse_time_ms("90"), Ok(90_000));
        assert_eq!(parse_time_ms("1m30"), Ok(90_000));
    }

    #[test]
    fn combined_times_add_up() {
        assert_eq!(parse_time_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_time_ms("1h 30m"), Ok(5_400_000));
        assert_eq!(parse_time_ms("1s500ms"), Ok(1_500));
        assert_eq!(parse_time_ms("1d2h3m4s5ms"), Ok(93_784_005));
        assert_eq!(parse_time_ms("30s "), Ok(30_000));
    }

    #[test]
    fn bad_times_are_refused() {
        assert_eq!(parse_time_ms(""), Err(ValueError::Empty));
        for text in [
            "s", "ms", "1x", "1.5s", "-1s", "+1s", " 1s", "1 s", "1S", "1H", "1mm", "30m1h",
            "1s1s", "1s5", "5ms1s", "1m s", "abc", "1e3",
        ] {
            assert!(
                matches!(parse_time_ms(text), Err(ValueError::Syntax(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn time_overflow_is_refused() {
        let err = Err(ValueError::OutOfRange("a shorter time"));
        assert_eq!(parse_time_ms("99999999999999999999ms"), err);
        assert_eq!(parse_time_ms("18446744073709551615s"), err);
        assert_eq!(parse_time_ms("584942418y"), err);
    }

    #[test]
    fn sizes_with_and_without_suffix() {
        let cases = [
            ("0", 0),
            ("4096", 4096),
            ("512k", 512 << 10),
            ("512K", 512 << 10),
            ("10m", 10 << 20),
            ("10M", 10 << 20),
            ("1g", 1 << 30),
            ("1G", 1 << 30),
        ];
        for (text, bytes) in cases {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn bad_sizes_are_refused() {
        assert_eq!(parse_size(""), Err(ValueError::Empty));
        for text in ["m", "10 m", "10mb", "1.5m", "-1", "10t", "ten", "é"] {
            assert!(
                matches!(parse_size(text), Err(ValueError::Syntax(_))),
                "{text}"
            );
        }
        assert_eq!(
            parse_size("99999999999999999g"),
            Err(ValueError::OutOfRange("a smaller size"))
        );
    }

    #[test]
    fn bounded_numbers_are_plain_digits_within_the_bounds() {
        let parse = |s| parse_bounded::<u8>(s, 1..=12, "not a number", "between 1 and 12");
        assert_eq!(parse("1"), Ok(1));
        assert_eq!(parse("12"), Ok(12));
        for text in ["", "+4", " 4", "4.0", "four", "-1"] {
            assert_eq!(
                parse(text),
                Err(ValueError::Syntax("not a number")),
                "{text}"
            );
        }
        for text in ["0", "13", "256", "99999999999999999999999"] {
            assert_eq!(
                parse(text),
                Err(ValueError::OutOfRange("between 1 and 12")),
                "{text}"
            );
        }
    }

    #[test]
    fn keywords_match_case_insensitively() {
        let table = [("on", true), ("off", false)];
        assert_eq!(match_keyword("ON", &table, "must be on or off"), Ok(true));
        assert_eq!(match_keyword("off", &table, "must be on or off"), Ok(false));
        assert_eq!(
            match_keyword("", &table, "must be on or off"),
            Err(ValueError::Empty)
        );
        assert_eq!(
            match_keyword("maybe", &table, "must be on or off"),
            Err(ValueError::Syntax("must be on or off"))
        );
    }

    #[test]
    fn errors_read_as_reasons() {
        assert_eq!(ValueError::Empty.to_string(), "empty value");
        assert_eq!(
            ValueError::OutOfRange("between 1 and 12").to_string(),
            "must be between 1 and 12"
        );
        assert_eq!(
            parse_time_ms("1x").unwrap_err().to_string(),
            "not a time (examples: 500ms, 30s, 5m, 1h30m)"
        );
    }
}

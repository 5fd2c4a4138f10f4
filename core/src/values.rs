//! Parsers for directive values (docs/directives.md). Pure: the glue passes the value
//! text and reports `invalid value "X" in "directive": <ValueError>` with
//! file and line.
#![forbid(unsafe_code)]

use core::ops::RangeInclusive;

use crate::limiter::breaker::{BanRule, StrikeRule};
use crate::limiter::RateLimit;
use crate::protocol::{MAX_BITS, MAX_DIFFICULTY, MIN_BITS, MIN_DIFFICULTY};

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

/// Fewest requests per window accepted by [`parse_limit`].
pub const MIN_LIMIT_REQUESTS: u32 = 1;
/// Most requests per window accepted by [`parse_limit`].
pub const MAX_LIMIT_REQUESTS: u32 = 1_000_000;
/// Shortest window accepted by [`parse_limit`]: one second, the unit of the
/// rate-limit headers.
pub const MIN_LIMIT_WINDOW_MS: u64 = 1_000;
/// Longest window accepted by [`parse_limit`]: one day.
pub const MAX_LIMIT_WINDOW_MS: u64 = 86_400_000;

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

/// `pow_shield_limit <requests> <window>`: requests 1..=1,000,000, window
/// a whole number of seconds from 1 s to 1 d (the rate-limit headers count
/// in seconds).
pub fn parse_limit(requests: &str, window: &str) -> Result<RateLimit, ValueError> {
    if requests.is_empty() {
        return Err(ValueError::Empty);
    }
    let requests = parse_bounded(
        requests,
        MIN_LIMIT_REQUESTS..=MAX_LIMIT_REQUESTS,
        "requests must be a whole number",
        "between 1 and 1000000 requests",
    )?;
    let window_ms = parse_time_ms(window)?;
    if !(MIN_LIMIT_WINDOW_MS..=MAX_LIMIT_WINDOW_MS).contains(&window_ms) {
        return Err(ValueError::OutOfRange("a window between 1s and 1d"));
    }
    if window_ms % 1_000 != 0 {
        return Err(ValueError::OutOfRange("a window of whole seconds"));
    }
    Ok(RateLimit {
        requests,
        window_ms,
    })
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

/// A difficulty: leading hex zeros 1..=12 (`4` is 16 bits), or with a `b`
/// suffix leading zero bits 1..=48 (`18b`).
pub fn parse_difficulty(s: &str) -> Result<Difficulty, ValueError> {
    if s.is_empty() {
        return Err(ValueError::Empty);
    }
    if let Some(bits) = s.strip_suffix('b') {
        let bits = parse_bounded(
            bits,
            MIN_BITS..=MAX_BITS,
            "not a whole number of hex digits or bits (examples: 4, 18b)",
            "between 1b and 48b",
        )?;
        return Ok(Difficulty::bits(bits));
    }
    let hex = parse_bounded(
        s,
        MIN_DIFFICULTY..=MAX_DIFFICULTY,
        "not a whole number of hex digits or bits (examples: 4, 18b)",
        "between 1 and 12",
    )?;
    Ok(Difficulty::hex(hex))
}

/// `max=<m>` of `pow_shield_difficulty <n> max=<m>`: at least the base, at
/// most 12 (48b).
pub fn parse_difficulty_max(s: &str, base: Difficulty) -> Result<Difficulty, ValueError> {
    let Some(max) = s.strip_prefix("max=") else {
        return Err(ValueError::Syntax("expected \"max=<difficulty>\""));
    };
    let max = parse_difficulty(max)?;
    if max.bits < base.bits {
        return Err(ValueError::OutOfRange("at least the base difficulty"));
    }
    Ok(max)
}

/// Most strikes `pow_shield_strikes` accepts.
pub const MAX_STRIKES: u32 = 1_000_000;

/// `pow_shield_strikes <n> <time>`: `n` in 1..=1000000, `time` 1s..=1d.
pub fn parse_strikes(count: &str, time: &str) -> Result<StrikeRule, ValueError> {
    let threshold = parse_bounded(
        count,
        1..=MAX_STRIKES,
        "strikes must be a whole number",
        "between 1 and 1000000 strikes",
    )?;
    Ok(StrikeRule {
        threshold,
        ttl_ms: parse_red_time(time)?,
    })
}

/// `pow_shield_ban <time> after=<k>`: `time` 1s..=1d, `k` in 1..=1000.
pub fn parse_ban(time: &str, after: &str) -> Result<BanRule, ValueError> {
    let ttl_ms = parse_red_time(time)?;
    let Some(after) = after.strip_prefix("after=") else {
        return Err(ValueError::Syntax("expected \"after=<count>\""));
    };
    let after = parse_bounded(
        after,
        1..=1_000,
        "after= must be a whole number",
        "between 1 and 1000 openings",
    )?;
    Ok(BanRule { after, ttl_ms })
}

/// How long strikes or a ban last: 1s..=1d (whole milliseconds).
fn parse_red_time(s: &str) -> Result<u64, ValueError> {
    let ms = parse_time_ms(s)?;
    if !(1_000..=86_400_000).contains(&ms) {
        return Err(ValueError::OutOfRange("a time between 1s and 1d"));
    }
    Ok(ms)
}

/// `pow_shield_block_status`: an error status 400..=599 (444 closes the
/// connection, as in nginx's `return 444`).
pub fn parse_block_status(s: &str) -> Result<u16, ValueError> {
    parse_bounded(s, 400..=599, "not a status code", "between 400 and 599")
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

/// `x`, `ietf`, `both` or `off`, case-insensitive like nginx's enum slots.
pub fn parse_headers_mode(s: &str) -> Result<HeadersMode, ValueError> {
    match_keyword(
        s,
        &[
            ("x", HeadersMode::X),
            ("ietf", HeadersMode::Ietf),
            ("both", HeadersMode::Both),
            ("off", HeadersMode::Off),
        ],
        "must be x, ietf, both or off",
    )
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

/// `local`, `open` or `closed`, case-insensitive.
pub fn parse_fail_policy(s: &str) -> Result<FailPolicy, ValueError> {
    match_keyword(
        s,
        &[
            ("local", FailPolicy::Local),
            ("open", FailPolicy::Open),
            ("closed", FailPolicy::Closed),
        ],
        "must be local, open or closed",
    )
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
fn match_keyword<T: Copy>(
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
    fn limit_of_60_per_minute() {
        assert_eq!(
            parse_limit("60", "1m"),
            Ok(RateLimit {
                requests: 60,
                window_ms: 60_000
            })
        );
    }

    #[test]
    fn limit_bounds_are_1_to_1000000_requests_and_1s_to_1d() {
        assert!(parse_limit("1", "1s").is_ok());
        assert!(parse_limit("1000000", "1d").is_ok());
        assert!(parse_limit("1", "1h30m").is_ok());
        for (requests, window) in [
            ("0", "1m"),
            ("1000001", "1m"),
            ("99999999999", "1m"),
            ("10", "999ms"),
            ("10", "0"),
            ("10", "1d1s"),
            ("10", "1500ms"),
        ] {
            assert!(
                matches!(
                    parse_limit(requests, window),
                    Err(ValueError::OutOfRange(_))
                ),
                "{requests} {window}"
            );
        }
    }

    #[test]
    fn limit_with_bad_syntax_is_refused() {
        assert_eq!(parse_limit("", "1m"), Err(ValueError::Empty));
        assert_eq!(parse_limit("10", ""), Err(ValueError::Empty));
        for (requests, window) in [("ten", "1m"), ("-1", "1m"), ("10r", "1m"), ("10", "1x")] {
            assert!(
                matches!(parse_limit(requests, window), Err(ValueError::Syntax(_))),
                "{requests} {window}"
            );
        }
    }

    #[test]
    fn difficulty_max_is_between_the_base_and_12() {
        let four = Difficulty::hex(4);
        assert_eq!(parse_difficulty_max("max=8", four), Ok(Difficulty::hex(8)));
        assert_eq!(parse_difficulty_max("max=4", four), Ok(four));
        assert!(matches!(
            parse_difficulty_max("max=3", four),
            Err(ValueError::OutOfRange(_))
        ));
        assert!(parse_difficulty_max("max=13", four).is_err());
        assert!(matches!(
            parse_difficulty_max("8", four),
            Err(ValueError::Syntax(_))
        ));
    }

    #[test]
    fn difficulty_max_compares_bits_whatever_the_unit() {
        let b18 = Difficulty::bits(18);
        assert_eq!(
            parse_difficulty_max("max=24b", b18),
            Ok(Difficulty::bits(24))
        );
        assert_eq!(parse_difficulty_max("max=5", b18), Ok(Difficulty::hex(5)));
        assert_eq!(
            parse_difficulty_max("max=4", b18),
            Err(ValueError::OutOfRange("at least the base difficulty"))
        );
        assert_eq!(
            parse_difficulty_max("max=15b", Difficulty::hex(4)),
            Err(ValueError::OutOfRange("at least the base difficulty"))
        );
        assert!(parse_difficulty_max("max=49b", b18).is_err());
    }

    #[test]
    fn difficulty_in_bits_is_1b_to_48b() {
        assert_eq!(parse_difficulty("1b"), Ok(Difficulty::bits(1)));
        assert_eq!(parse_difficulty("18b"), Ok(Difficulty::bits(18)));
        assert_eq!(parse_difficulty("48b"), Ok(Difficulty::bits(48)));
        assert_eq!(parse_difficulty("16b").map(|d| d.bits), Ok(16));
        assert_eq!(parse_difficulty("4").map(|d| d.bits), Ok(16));
        for text in ["0b", "49b", "256b", "99999999999999999999999b"] {
            assert_eq!(
                parse_difficulty(text),
                Err(ValueError::OutOfRange("between 1b and 48b")),
                "{text}"
            );
        }
        for text in ["b", "18B", "18bb", "b18", "18 b", "1.5b", "-1b"] {
            assert!(
                matches!(parse_difficulty(text), Err(ValueError::Syntax(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn strikes_take_a_count_and_a_time() {
        assert_eq!(
            parse_strikes("5", "60s"),
            Ok(StrikeRule {
                threshold: 5,
                ttl_ms: 60_000
            })
        );
        for (n, t) in [
            ("0", "60s"),
            ("x", "60s"),
            ("5", "0"),
            ("5", "2d"),
            ("5", "s"),
        ] {
            assert!(parse_strikes(n, t).is_err(), "{n} {t}");
        }
    }

    #[test]
    fn ban_takes_a_time_and_after() {
        assert_eq!(
            parse_ban("1h", "after=3"),
            Ok(BanRule {
                after: 3,
                ttl_ms: 3_600_000
            })
        );
        for (t, a) in [
            ("1h", "3"),
            ("1h", "after=0"),
            ("0", "after=3"),
            ("1h", "after="),
        ] {
            assert!(parse_ban(t, a).is_err(), "{t} {a}");
        }
    }

    #[test]
    fn block_status_is_an_error_status() {
        assert_eq!(parse_block_status("403"), Ok(403));
        assert_eq!(parse_block_status("444"), Ok(444));
        for text in ["200", "399", "600", "abc", ""] {
            assert!(parse_block_status(text).is_err(), "{text}");
        }
    }

    #[test]
    fn difficulty_is_1_to_12() {
        assert_eq!(parse_difficulty("1"), Ok(Difficulty::hex(1)));
        assert_eq!(parse_difficulty("4"), Ok(Difficulty::hex(4)));
        assert_eq!(parse_difficulty("12"), Ok(Difficulty::hex(12)));
        for text in ["0", "13", "256", "99999999999999999999999"] {
            assert_eq!(
                parse_difficulty(text),
                Err(ValueError::OutOfRange("between 1 and 12")),
                "{text}"
            );
        }
        assert_eq!(
            parse_difficulty("13"),
            Err(ValueError::OutOfRange("between 1 and 12"))
        );
        assert_eq!(parse_difficulty(""), Err(ValueError::Empty));
        for text in ["+4", " 4", "4.0", "four"] {
            assert!(
                matches!(parse_difficulty(text), Err(ValueError::Syntax(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn headers_modes_case_insensitive() {
        assert_eq!(parse_headers_mode("x"), Ok(HeadersMode::X));
        assert_eq!(parse_headers_mode("ietf"), Ok(HeadersMode::Ietf));
        assert_eq!(parse_headers_mode("BOTH"), Ok(HeadersMode::Both));
        assert_eq!(parse_headers_mode("off"), Ok(HeadersMode::Off));
        assert_eq!(parse_headers_mode(""), Err(ValueError::Empty));
        assert!(parse_headers_mode("on").is_err());
        assert!(parse_headers_mode("x-ratelimit").is_err());
    }

    #[test]
    fn fail_policies_case_insensitive() {
        assert_eq!(parse_fail_policy("local"), Ok(FailPolicy::Local));
        assert_eq!(parse_fail_policy("open"), Ok(FailPolicy::Open));
        assert_eq!(parse_fail_policy("Closed"), Ok(FailPolicy::Closed));
        assert_eq!(parse_fail_policy(""), Err(ValueError::Empty));
        assert!(parse_fail_policy("fail").is_err());
    }

    #[test]
    fn errors_read_as_reasons() {
        assert_eq!(ValueError::Empty.to_string(), "empty value");
        assert_eq!(
            parse_difficulty("13").unwrap_err().to_string(),
            "must be between 1 and 12"
        );
        assert_eq!(
            parse_time_ms("1x").unwrap_err().to_string(),
            "not a time (examples: 500ms, 30s, 5m, 1h30m)"
        );
    }
}

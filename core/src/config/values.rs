//! What each word of a directive means: one parser per word, pure. A
//! refusal is the reason only ([`ValueError`], never the value: it may be
//! a password); `args` names the word and the directive, nginx adds the
//! file and line. nginx's grammar for times, sizes and numbers is
//! `crate::syntax`.

use super::settings::LogLevel;
use crate::protocol::{Work, MAX_BITS, MAX_DIFFICULTY, MIN_BITS, MIN_DIFFICULTY};
use crate::syntax::{
    match_keyword, parse_bounded, parse_time_ms, Difficulty, FailPolicy, HeadersMode, ValueError,
};

/// Fewest requests per window accepted by [`parse_requests`].
pub const MIN_LIMIT_REQUESTS: u32 = 1;
/// Most requests per window accepted by [`parse_requests`].
pub const MAX_LIMIT_REQUESTS: u32 = 1_000_000;
/// Shortest window accepted by [`parse_window`]: one second, the unit of the
/// rate-limit headers.
pub const MIN_LIMIT_WINDOW_MS: u64 = 1_000;
/// Longest window accepted by [`parse_window`]: one day.
pub const MAX_LIMIT_WINDOW_MS: u64 = 86_400_000;
/// Most strikes `pow_shield_strikes` accepts.
pub const MAX_STRIKES: u32 = 1_000_000;
/// Shortest `pow_shield_challenge_ttl`: clients need time to solve.
pub const MIN_CHALLENGE_TTL_MS: u64 = 1_000;
/// Longest `pow_shield_challenge_ttl`: the replay cache must hold every
/// spent token that long.
pub const MAX_CHALLENGE_TTL_MS: u64 = 86_400_000;
/// Shortest `pow_shield_log_summary`: the module's timer ticks each second.
pub const MIN_LOG_SUMMARY_MS: u64 = 1_000;
/// Longest `pow_shield_log_summary`.
pub const MAX_LOG_SUMMARY_MS: u64 = 3_600_000;

/// `<requests>` of `pow_shield_limit`: 1..=1,000,000.
pub fn parse_requests(s: &str) -> Result<u32, ValueError> {
    if s.is_empty() {
        return Err(ValueError::Empty);
    }
    parse_bounded(
        s,
        MIN_LIMIT_REQUESTS..=MAX_LIMIT_REQUESTS,
        "requests must be a whole number",
        "between 1 and 1000000 requests",
    )
}

/// `<window>` of `pow_shield_limit`, in milliseconds: a whole number of
/// seconds from 1 s to 1 d (the rate-limit headers count in seconds).
pub fn parse_window(s: &str) -> Result<u64, ValueError> {
    let window_ms = parse_time_ms(s)?;
    if !(MIN_LIMIT_WINDOW_MS..=MAX_LIMIT_WINDOW_MS).contains(&window_ms) {
        return Err(ValueError::OutOfRange("a window between 1s and 1d"));
    }
    if window_ms % 1_000 != 0 {
        return Err(ValueError::OutOfRange("a window of whole seconds"));
    }
    Ok(window_ms)
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

/// `<count>` of `pow_shield_strikes`: 1..=1000000.
pub fn parse_strike_count(s: &str) -> Result<u32, ValueError> {
    parse_bounded(
        s,
        1..=MAX_STRIKES,
        "strikes must be a whole number",
        "between 1 and 1000000 strikes",
    )
}

/// How long strikes (`pow_shield_strikes <count> <time>`) or a ban
/// (`pow_shield_ban <time> ...`) last: 1s..=1d, in milliseconds.
pub fn parse_breaker_time(s: &str) -> Result<u64, ValueError> {
    let ms = parse_time_ms(s)?;
    if !(1_000..=86_400_000).contains(&ms) {
        return Err(ValueError::OutOfRange("a time between 1s and 1d"));
    }
    Ok(ms)
}

/// `after=<k>` of `pow_shield_ban`: `k` breaker openings, 1..=1000.
pub fn parse_ban_after(s: &str) -> Result<u32, ValueError> {
    let Some(after) = s.strip_prefix("after=") else {
        return Err(ValueError::Syntax("expected \"after=<count>\""));
    };
    parse_bounded(
        after,
        1..=1_000,
        "after= must be a whole number",
        "between 1 and 1000 openings",
    )
}

/// `pow_shield_block_status`: an error status 400..=599 (444 closes the
/// connection, as in nginx's `return 444`).
pub fn parse_block_status(s: &str) -> Result<u16, ValueError> {
    parse_bounded(s, 400..=599, "not a status code", "between 400 and 599")
}

/// `pow_shield_challenge_ttl`, 1s..=1d, in milliseconds.
pub fn parse_challenge_ttl(s: &str) -> Result<u64, ValueError> {
    let ttl = parse_time_ms(s)?;
    if !(MIN_CHALLENGE_TTL_MS..=MAX_CHALLENGE_TTL_MS).contains(&ttl) {
        return Err(ValueError::OutOfRange("between 1s and 1d"));
    }
    Ok(ttl)
}

/// The interval of `pow_shield_log_summary` (its `off` is the directive's):
/// how far apart a client's summary lines are, 1s..=1h, in milliseconds.
pub fn parse_log_summary(s: &str) -> Result<u64, ValueError> {
    let interval = parse_time_ms(s)?;
    if !(MIN_LOG_SUMMARY_MS..=MAX_LOG_SUMMARY_MS).contains(&interval) {
        return Err(ValueError::OutOfRange("between 1s and 1h, or \"off\""));
    }
    Ok(interval)
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

/// `sha256` or `equix`, case-insensitive; `equix` only in a build that
/// has it (the `equix` feature: `make build` turns it on).
pub fn parse_work(s: &str) -> Result<Work, ValueError> {
    let work = match_keyword(
        s,
        &[("sha256", Work::Sha256), ("equix", Work::Equix)],
        "must be sha256 or equix",
    )?;
    if !work.is_built_in() {
        return Err(ValueError::Syntax(
            "this build has no Equi-X: build the module with the cargo feature \"equix\" \
             (make build does)",
        ));
    }
    Ok(work)
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

/// `pow_shield_log_level` and `pow_shield_breaker_log_level`: `info`,
/// `notice`, `warn` or `error`, as written (lower case).
pub fn parse_log_level(s: &str) -> Result<LogLevel, ValueError> {
    match s {
        "info" => Ok(LogLevel::Info),
        "notice" => Ok(LogLevel::Notice),
        "warn" => Ok(LogLevel::Warn),
        "error" => Ok(LogLevel::Error),
        _ => Err(ValueError::Syntax("expected info, notice, warn or error")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_of_60_per_minute() {
        assert_eq!(parse_requests("60"), Ok(60));
        assert_eq!(parse_window("1m"), Ok(60_000));
    }

    #[test]
    fn limit_bounds_are_1_to_1000000_requests_and_1s_to_1d() {
        assert_eq!(parse_requests("1"), Ok(1));
        assert_eq!(parse_requests("1000000"), Ok(1_000_000));
        assert_eq!(parse_window("1s"), Ok(1_000));
        assert_eq!(parse_window("1d"), Ok(86_400_000));
        assert_eq!(parse_window("1h30m"), Ok(5_400_000));
        for requests in ["0", "1000001", "99999999999"] {
            assert_eq!(
                parse_requests(requests),
                Err(ValueError::OutOfRange("between 1 and 1000000 requests")),
                "{requests}"
            );
        }
        for window in ["999ms", "0", "1d1s", "1500ms"] {
            assert!(
                matches!(parse_window(window), Err(ValueError::OutOfRange(_))),
                "{window}"
            );
        }
    }

    #[test]
    fn limit_with_bad_syntax_is_refused() {
        assert_eq!(parse_requests(""), Err(ValueError::Empty));
        assert_eq!(parse_window(""), Err(ValueError::Empty));
        for requests in ["ten", "-1", "10r"] {
            assert!(
                matches!(parse_requests(requests), Err(ValueError::Syntax(_))),
                "{requests}"
            );
        }
        assert!(matches!(parse_window("1x"), Err(ValueError::Syntax(_))));
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
        assert_eq!(parse_difficulty(""), Err(ValueError::Empty));
        for text in ["+4", " 4", "4.0", "four"] {
            assert!(
                matches!(parse_difficulty(text), Err(ValueError::Syntax(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn strikes_take_a_count_and_a_time() {
        assert_eq!(parse_strike_count("5"), Ok(5));
        assert_eq!(parse_strike_count("1000000"), Ok(MAX_STRIKES));
        assert_eq!(parse_breaker_time("60s"), Ok(60_000));
        for count in ["0", "x", "1000001", ""] {
            assert!(parse_strike_count(count).is_err(), "{count}");
        }
        for time in ["0", "2d", "s", "999ms"] {
            assert!(parse_breaker_time(time).is_err(), "{time}");
        }
    }

    #[test]
    fn ban_takes_a_time_and_after() {
        assert_eq!(parse_breaker_time("1h"), Ok(3_600_000));
        assert_eq!(parse_ban_after("after=3"), Ok(3));
        assert_eq!(parse_ban_after("after=1000"), Ok(1_000));
        for after in ["3", "after=0", "after=", "after=1001", "after=x"] {
            assert!(parse_ban_after(after).is_err(), "{after}");
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
    fn challenge_ttl_is_between_a_second_and_a_day() {
        assert_eq!(parse_challenge_ttl("1s"), Ok(MIN_CHALLENGE_TTL_MS));
        assert_eq!(parse_challenge_ttl("1d"), Ok(MAX_CHALLENGE_TTL_MS));
        for text in ["0", "999ms", "1d1ms"] {
            assert_eq!(
                parse_challenge_ttl(text),
                Err(ValueError::OutOfRange("between 1s and 1d")),
                "{text}"
            );
        }
        assert!(matches!(
            parse_challenge_ttl("abc"),
            Err(ValueError::Syntax(_))
        ));
    }

    #[test]
    fn log_summary_interval_is_1s_to_1h() {
        assert_eq!(parse_log_summary("1s"), Ok(MIN_LOG_SUMMARY_MS));
        assert_eq!(parse_log_summary("1h"), Ok(MAX_LOG_SUMMARY_MS));
        assert!(matches!(
            parse_log_summary("500ms"),
            Err(ValueError::OutOfRange(_))
        ));
        assert!(matches!(
            parse_log_summary("off"),
            Err(ValueError::Syntax(_))
        ));
    }

    #[test]
    fn work_is_sha256_or_equix_where_the_build_has_it() {
        assert_eq!(parse_work("sha256"), Ok(Work::Sha256));
        assert_eq!(parse_work(""), Err(ValueError::Empty));
        assert!(parse_work("argon2").is_err());
        match Work::Equix.is_built_in() {
            true => assert_eq!(parse_work("EquiX"), Ok(Work::Equix)),
            false => assert!(parse_work("equix")
                .is_err_and(|e| e.to_string().contains("cargo feature \"equix\""))),
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
    fn log_levels_are_four_lower_case_words() {
        assert_eq!(parse_log_level("warn"), Ok(LogLevel::Warn));
        assert!(parse_log_level("WARN").is_err());
        assert_eq!(
            parse_log_level("loud").unwrap_err().to_string(),
            "expected info, notice, warn or error"
        );
    }

    #[test]
    fn errors_read_as_reasons() {
        assert_eq!(
            parse_difficulty("13").unwrap_err().to_string(),
            "must be between 1 and 12"
        );
        assert_eq!(
            parse_window("1x").unwrap_err().to_string(),
            "not a time (examples: 500ms, 30s, 5m, 1h30m)"
        );
    }
}

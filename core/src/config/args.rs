//! What each directive's words mean, and which word a refusal names: the
//! word at fault as written, so `nginx -t` points at it. nginx has checked
//! the number of words against the command table before these run.

use super::refusal::Refusal;
use super::settings::LogLevel;
use crate::decision::DifficultyRule;
use crate::limiter::breaker::{BanRule, StrikeRule};
use crate::limiter::RateLimit;
use crate::protocol::{Secret, SecretKeys};
use crate::values::{self, FailPolicy, HeadersMode};

/// Shortest `pow_shield_challenge_ttl`: clients need time to solve.
pub const MIN_CHALLENGE_TTL_MS: u64 = 1_000;
/// Longest `pow_shield_challenge_ttl`: the replay cache must hold every
/// spent token that long.
pub const MAX_CHALLENGE_TTL_MS: u64 = 86_400_000;

/// The first word after the directive's name.
pub fn first<'a>(args: &[&'a str]) -> &'a str {
    args.first().copied().unwrap_or("")
}

/// `pow_shield_limit <requests> <window> [approx] | off`: the limit and
/// whether it counts `approx`; `None` is `off`.
pub fn limit(args: &[&str]) -> Result<Option<(RateLimit, bool)>, Refusal> {
    const USAGE: &str = "expected \"<requests> <window> [approx]\" or \"off\"";
    let (requests, window, approx) = match args {
        ["off"] => return Ok(None),
        [requests, window] => (*requests, *window, false),
        [requests, window, "approx"] => (*requests, *window, true),
        [_, _, other] => return Err(Refusal::invalid(other, "expected \"approx\" or nothing")),
        [other] => return Err(Refusal::invalid(other, USAGE)),
        _ => return Err(Refusal::invalid("", USAGE)),
    };
    let limit = values::parse_limit(requests, window).map_err(|e| {
        let count_ok = requests
            .parse::<u32>()
            .is_ok_and(|n| (values::MIN_LIMIT_REQUESTS..=values::MAX_LIMIT_REQUESTS).contains(&n));
        Refusal::invalid(if count_ok { window } else { requests }, e)
    })?;
    Ok(Some((limit, approx)))
}

/// `pow_shield_difficulty <n> [max=<m>]`.
pub fn difficulty(args: &[&str]) -> Result<DifficultyRule, Refusal> {
    let v = first(args);
    let base = values::parse_difficulty(v).map_err(|e| Refusal::invalid(v, e))?;
    let max = match args.get(1) {
        Some(m) => values::parse_difficulty_max(m, base).map_err(|e| Refusal::invalid(m, e))?,
        None => base,
    };
    Ok(DifficultyRule::rising(base, max))
}

/// `pow_shield_strikes <count> <time> | off`; `None` is `off`.
pub fn strikes(args: &[&str]) -> Result<Option<StrikeRule>, Refusal> {
    const USAGE: &str = "expected \"<count> <time>\" or \"off\"";
    match args {
        ["off"] => Ok(None),
        [count, time] => values::parse_strikes(count, time).map(Some).map_err(|e| {
            let count_ok = values::parse_strikes(count, "1m").is_ok();
            Refusal::invalid(if count_ok { time } else { count }, e)
        }),
        [other, ..] => Err(Refusal::invalid(other, USAGE)),
        [] => Err(Refusal::invalid("", USAGE)),
    }
}

/// `pow_shield_ban <time> after=<count> | off`; `None` is `off`.
pub fn ban(args: &[&str]) -> Result<Option<BanRule>, Refusal> {
    const USAGE: &str = "expected \"<time> after=<count>\" or \"off\"";
    match args {
        ["off"] => Ok(None),
        [time, after] => values::parse_ban(time, after).map(Some).map_err(|e| {
            let time_ok = values::parse_ban(time, "after=1").is_ok();
            Refusal::invalid(if time_ok { after } else { time }, e)
        }),
        [other, ..] => Err(Refusal::invalid(other, USAGE)),
        [] => Err(Refusal::invalid("", USAGE)),
    }
}

/// `pow_shield_block_status <status>`.
pub fn block_status(v: &str) -> Result<u16, Refusal> {
    values::parse_block_status(v).map_err(|e| Refusal::invalid(v, e))
}

/// `pow_shield_challenge_ttl <time>`, 1s..=1d, in milliseconds.
pub fn challenge_ttl(v: &str) -> Result<u64, Refusal> {
    let ttl = values::parse_time_ms(v).map_err(|e| Refusal::invalid(v, e))?;
    if !(MIN_CHALLENGE_TTL_MS..=MAX_CHALLENGE_TTL_MS).contains(&ttl) {
        return Err(Refusal::invalid(v, "must be between 1s and 1d"));
    }
    Ok(ttl)
}

/// `pow_shield_headers x | ietf | both | off`.
pub fn headers(v: &str) -> Result<HeadersMode, Refusal> {
    values::parse_headers_mode(v).map_err(|e| Refusal::invalid(v, e))
}

/// `pow_shield_log_level` and `pow_shield_breaker_log_level`: `info`,
/// `notice`, `warn` or `error`, as written (lower case).
pub fn log_level(v: &str) -> Result<LogLevel, Refusal> {
    match v {
        "info" => Ok(LogLevel::Info),
        "notice" => Ok(LogLevel::Notice),
        "warn" => Ok(LogLevel::Warn),
        "error" => Ok(LogLevel::Error),
        v => Err(Refusal::invalid(v, "expected info, notice, warn or error")),
    }
}

/// `pow_shield_fail local | open | closed [trusted=<value>]`: the policy
/// and the text of `trusted=`, for the module to compile.
pub fn fail<'a>(args: &[&'a str]) -> Result<(FailPolicy, Option<&'a str>), Refusal> {
    let v = first(args);
    let policy = values::parse_fail_policy(v).map_err(|e| Refusal::invalid(v, e))?;
    let Some(&extra) = args.get(1) else {
        return Ok((policy, None));
    };
    let Some(value) = extra.strip_prefix("trusted=") else {
        return Err(Refusal::invalid(extra, "expected \"trusted=<value>\""));
    };
    if policy != FailPolicy::Closed {
        return Err(Refusal::invalid(
            extra,
            "\"trusted=\" only goes with \"closed\"",
        ));
    }
    if value.is_empty() {
        return Err(Refusal::invalid(extra, "\"trusted=\" needs a value"));
    }
    Ok((policy, Some(value)))
}

/// `pow_shield_secret <key>`. The refusal never shows the key.
pub fn secret(v: &str) -> Result<SecretKeys, Refusal> {
    let current = Secret::new(v.as_bytes()).map_err(|e| Refusal::invalid("...", e))?;
    Ok(SecretKeys {
        current,
        previous: None,
    })
}

/// The keys of `pow_shield_secret_file <v>`, read from `path` (the file's
/// name resolved against the prefix). The refusal never shows a key.
pub fn secret_file(v: &str, path: &str, contents: &[u8]) -> Result<SecretKeys, Refusal> {
    SecretKeys::from_file_contents(contents)
        .map_err(|e| Refusal::invalid(v, format_args!("\"{path}\": {e}")))
}

/// `pow_shield_zone <size>`, at least `min` bytes.
pub fn zone_size(v: &str, min: usize) -> Result<usize, Refusal> {
    let size = values::parse_size(v).map_err(|e| Refusal::invalid(v, e))?;
    if size < min {
        return Err(Refusal::invalid(
            v,
            format_args!("the zone needs at least {}k", min / 1024),
        ));
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word a refusal names.
    fn named<T: core::fmt::Debug>(result: Result<T, Refusal>) -> String {
        match result {
            Err(Refusal::Invalid { value, .. }) => value,
            other => panic!("expected an invalid value, got {other:?}"),
        }
    }

    #[test]
    fn limit_reads_requests_window_and_approx() {
        let ten_a_minute = RateLimit {
            requests: 10,
            window_ms: 60_000,
        };
        assert_eq!(limit(&["10", "1m"]), Ok(Some((ten_a_minute, false))));
        assert_eq!(
            limit(&["10", "1m", "approx"]),
            Ok(Some((ten_a_minute, true)))
        );
        assert_eq!(limit(&["off"]), Ok(None));
    }

    #[test]
    fn limit_names_the_word_at_fault() {
        assert_eq!(named(limit(&["0", "1m"])), "0");
        assert_eq!(named(limit(&["-5", "1m"])), "-5");
        assert_eq!(named(limit(&["abc", "1m"])), "abc");
        assert_eq!(named(limit(&["10", "abc"])), "abc");
        assert_eq!(named(limit(&["10", "0s"])), "0s");
        assert_eq!(named(limit(&["on"])), "on");
        assert_eq!(named(limit(&["10", "1m", "exact"])), "exact");
        // Both wrong: the count is named first.
        assert_eq!(named(limit(&["0", "abc"])), "0");
    }

    #[test]
    fn difficulty_reads_a_base_and_an_optional_max() {
        assert_eq!(difficulty(&["4"]), Ok(DifficultyRule::hex(4)));
        assert_eq!(
            difficulty(&["4", "max=8"]),
            Ok(DifficultyRule {
                base: 16,
                max: 32,
                step: 4
            })
        );
        assert_eq!(difficulty(&["18b"]), Ok(DifficultyRule::bits(18)));
        assert_eq!(
            difficulty(&["18b", "max=6"]),
            Ok(DifficultyRule {
                base: 18,
                max: 24,
                step: 1
            })
        );
        assert_eq!(named(difficulty(&["49b"])), "49b");
        assert_eq!(named(difficulty(&["18b", "max=4"])), "max=4");
        assert_eq!(named(difficulty(&["13"])), "13");
        assert_eq!(named(difficulty(&["4", "max=3"])), "max=3");
        assert_eq!(named(difficulty(&["4", "8"])), "8");
    }

    #[test]
    fn strikes_and_ban_name_the_word_at_fault_or_read_off() {
        assert_eq!(strikes(&["off"]), Ok(None));
        assert_eq!(
            strikes(&["5", "60s"]),
            Ok(Some(StrikeRule {
                threshold: 5,
                ttl_ms: 60_000
            }))
        );
        assert_eq!(named(strikes(&["0", "60s"])), "0");
        assert_eq!(named(strikes(&["5", "2d"])), "2d");
        assert_eq!(named(strikes(&["sometimes"])), "sometimes");
        assert_eq!(ban(&["off"]), Ok(None));
        assert_eq!(
            ban(&["1h", "after=3"]),
            Ok(Some(BanRule {
                after: 3,
                ttl_ms: 3_600_000
            }))
        );
        assert_eq!(named(ban(&["1h"])), "1h");
        assert_eq!(named(ban(&["1h", "after=0"])), "after=0");
        assert_eq!(named(ban(&["0", "after=3"])), "0");
    }

    #[test]
    fn challenge_ttl_is_between_a_second_and_a_day() {
        assert_eq!(challenge_ttl("1s"), Ok(1_000));
        assert_eq!(challenge_ttl("1d"), Ok(86_400_000));
        assert_eq!(
            challenge_ttl("0"),
            Err(Refusal::invalid("0", "must be between 1s and 1d"))
        );
        assert_eq!(named(challenge_ttl("999ms")), "999ms");
        assert_eq!(named(challenge_ttl("abc")), "abc");
    }

    #[test]
    fn log_levels_are_four_lower_case_words() {
        assert_eq!(log_level("info"), Ok(LogLevel::Info));
        assert_eq!(log_level("notice"), Ok(LogLevel::Notice));
        assert_eq!(log_level("warn"), Ok(LogLevel::Warn));
        assert_eq!(log_level("error"), Ok(LogLevel::Error));
        assert_eq!(
            log_level("loud"),
            Err(Refusal::invalid(
                "loud",
                "expected info, notice, warn or error"
            ))
        );
        assert_eq!(named(log_level("WARN")), "WARN");
    }

    #[test]
    fn trusted_goes_only_with_closed_and_needs_a_value() {
        assert_eq!(fail(&["open"]), Ok((FailPolicy::Open, None)));
        assert_eq!(
            fail(&["closed", "trusted=$ok"]),
            Ok((FailPolicy::Closed, Some("$ok")))
        );
        assert_eq!(named(fail(&["sometimes"])), "sometimes");
        assert_eq!(named(fail(&["open", "trusted=$ok"])), "trusted=$ok");
        assert_eq!(named(fail(&["closed", "trusted="])), "trusted=");
        assert_eq!(named(fail(&["closed", "$ok"])), "$ok");
    }

    #[test]
    fn a_short_secret_is_refused_without_showing_it() {
        assert_eq!(named(secret("short")), "...");
        assert!(secret(&"s".repeat(32)).is_ok());
    }

    #[test]
    fn a_secret_file_refusal_names_the_file_not_a_key() {
        let refusal = secret_file("keys", "/etc/keys", b"short\n");
        let Err(Refusal::Invalid { value, reason }) = refusal else {
            panic!("expected a refusal");
        };
        assert_eq!(value, "keys");
        assert!(reason.starts_with("\"/etc/keys\": "), "{reason}");
        assert!(!reason.contains("short"), "{reason}");
    }

    #[test]
    fn the_zone_has_a_minimum_size_in_kilobytes() {
        assert_eq!(zone_size("1m", 32_768), Ok(1_048_576));
        assert_eq!(
            zone_size("1k", 32_768),
            Err(Refusal::invalid("1k", "the zone needs at least 32k"))
        );
        assert_eq!(named(zone_size("abc", 32_768)), "abc");
    }
}

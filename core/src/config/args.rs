//! Which words each directive takes, and which word a refusal names: the
//! word at fault as written, so `nginx -t` points at it. What one word
//! means is `values` (one parser per word); nginx has checked the number
//! of words against the command table before these run.

use super::directive_error::DirectiveError;
use super::limit_key;
use super::settings::LogLevel;
use super::values;
use crate::decision::DifficultyRule;
use crate::limiter::breaker::{BanRule, StrikeRule};
use crate::limiter::limits::StackError;
use crate::limiter::{KeyId, Limit, LimitName, Limits, RateLimit};
use crate::protocol::{Secret, SecretKeys};
use crate::syntax::{self, FailPolicy, HeadersMode, ValueError};

/// `word` as `parse` reads it; its refusal names the word.
fn read<T>(
    word: &str,
    parse: impl FnOnce(&str) -> Result<T, ValueError>,
) -> Result<T, DirectiveError> {
    parse(word).map_err(|e| DirectiveError::invalid(word, e))
}

/// The first word after the directive's name.
pub fn first<'a>(args: &[&'a str]) -> &'a str {
    args.first().copied().unwrap_or("")
}

/// One `pow_shield_limit` line that is not `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitLine<'a> {
    pub limit: RateLimit,
    pub approx: bool,
    pub name: Option<LimitName>,
    /// `key=`'s value as written (the module compiles its variables);
    /// `None`: counted per client key.
    pub key: Option<&'a str>,
}

/// `pow_shield_limit <requests> <window> [approx] [name=<name>]
/// [key=<value>] | off`; `None` is `off`.
pub fn limit<'a>(args: &[&'a str]) -> Result<Option<LimitLine<'a>>, DirectiveError> {
    const USAGE: &str =
        "expected \"<requests> <window> [approx] [name=<name>] [key=<value>]\" or \"off\"";
    let (requests, window, rest) = match args {
        ["off"] => return Ok(None),
        [requests, window, rest @ ..] => (*requests, *window, rest),
        [other] => return Err(DirectiveError::invalid(other, USAGE)),
        [] => return Err(DirectiveError::invalid("", USAGE)),
    };
    let limit = RateLimit {
        requests: read(requests, values::parse_requests)?,
        window_ms: read(window, values::parse_window)?,
    };
    // The options in any order, each at most once (as `limit_req`'s).
    let (mut approx, mut name, mut key) = (false, None, None);
    for &w in rest {
        let once = |seen: bool| match seen {
            true => Err(DirectiveError::invalid(w, "each option at most once")),
            false => Ok(()),
        };
        if w == "approx" {
            once(approx)?;
            approx = true;
        } else if let Some(value) = w.strip_prefix("name=") {
            once(name.is_some())?;
            name = Some(LimitName::new(value).map_err(|e| DirectiveError::invalid(w, e))?);
        } else if let Some(value) = w.strip_prefix("key=") {
            once(key.is_some())?;
            if let Some(why) = limit_key::refused(value) {
                return Err(DirectiveError::invalid(w, why));
            }
            key = Some(value);
        } else {
            return Err(DirectiveError::invalid(w, USAGE));
        }
    }
    Ok(Some(LimitLine {
        limit,
        approx,
        name,
        key,
    }))
}

impl LimitLine<'_> {
    /// The line's [`Limit`] (its `key=` by the identity of its text).
    pub fn limit(&self) -> Limit {
        Limit {
            approx: self.approx,
            named: self.name,
            key: self.key.map(KeyId::of),
            ..Limit::new(self.limit)
        }
    }
}

/// Adds a `pow_shield_limit` line to what the context's earlier lines set
/// (`slot`, as `Settings::limit` holds it): several lines stack, each
/// counting its own way (`approx` or exact), up to [`crate::limiter::MAX_LIMITS`]; `off`
/// stands alone. `args` are the line's words, for the refusal.
pub fn stack_limit(
    slot: &mut Option<Option<Limits>>,
    line: Option<LimitLine>,
    args: &[&str],
) -> Result<(), DirectiveError> {
    let word = |w: &str| args.iter().find(|a| a.starts_with(w)).copied();
    match (slot.as_mut(), line) {
        (None, None) => *slot = Some(None),
        (None, Some(line)) => *slot = Some(Some(Limits::of(line.limit()))),
        (Some(None), _) | (Some(Some(_)), None) => {
            return Err(DirectiveError::invalid(
                first(args),
                "\"pow_shield_limit off\" and a limit in one context",
            ))
        }
        (Some(Some(limits)), Some(line)) => {
            limits.add(line.limit()).map_err(|e| {
                let at = match e {
                    StackError::DuplicateName => word("name=").unwrap_or(first(args)),
                    StackError::DuplicateLimit => word("key=").unwrap_or(first(args)),
                    StackError::TooMany => first(args),
                };
                DirectiveError::invalid(at, e.message())
            })?;
        }
    }
    Ok(())
}

/// `pow_shield_difficulty <n> [max=<m>]`.
pub fn difficulty(args: &[&str]) -> Result<DifficultyRule, DirectiveError> {
    let base = read(first(args), values::parse_difficulty)?;
    let max = match args.get(1) {
        Some(m) => read(m, |m| values::parse_difficulty_max(m, base))?,
        None => base,
    };
    Ok(DifficultyRule::rising(base, max))
}

/// `pow_shield_strikes <count> <time> | off`; `None` is `off`.
pub fn strikes(args: &[&str]) -> Result<Option<StrikeRule>, DirectiveError> {
    const USAGE: &str = "expected \"<count> <time>\" or \"off\"";
    match args {
        ["off"] => Ok(None),
        [count, time] => Ok(Some(StrikeRule {
            threshold: read(count, values::parse_strike_count)?,
            ttl_ms: read(time, values::parse_breaker_time)?,
        })),
        [other, ..] => Err(DirectiveError::invalid(other, USAGE)),
        [] => Err(DirectiveError::invalid("", USAGE)),
    }
}

/// `pow_shield_ban <time> after=<count> | off`; `None` is `off`.
pub fn ban(args: &[&str]) -> Result<Option<BanRule>, DirectiveError> {
    const USAGE: &str = "expected \"<time> after=<count>\" or \"off\"";
    match args {
        ["off"] => Ok(None),
        [time, after] => Ok(Some(BanRule {
            ttl_ms: read(time, values::parse_breaker_time)?,
            after: read(after, values::parse_ban_after)?,
        })),
        [other, ..] => Err(DirectiveError::invalid(other, USAGE)),
        [] => Err(DirectiveError::invalid("", USAGE)),
    }
}

/// `pow_shield_block_status <status>`.
pub fn block_status(v: &str) -> Result<u16, DirectiveError> {
    read(v, values::parse_block_status)
}

/// `pow_shield_challenge_ttl <time>`, 1s..=1d, in milliseconds.
pub fn challenge_ttl(v: &str) -> Result<u64, DirectiveError> {
    read(v, values::parse_challenge_ttl)
}

/// `pow_shield_headers x | ietf | both | off`.
pub fn headers(v: &str) -> Result<HeadersMode, DirectiveError> {
    read(v, values::parse_headers_mode)
}

/// `pow_shield_work sha256 | equix`.
pub fn work(v: &str) -> Result<crate::protocol::Work, DirectiveError> {
    read(v, values::parse_work)
}

/// `pow_shield_log_level` and `pow_shield_breaker_log_level`: `info`,
/// `notice`, `warn` or `error`, as written (lower case).
pub fn log_level(v: &str) -> Result<LogLevel, DirectiveError> {
    read(v, values::parse_log_level)
}

/// `pow_shield_log_summary <interval> | off`: how far apart a client's
/// summary lines are (milliseconds, 1s..=1h); `None` is `off`, every
/// rejection its own line.
pub fn log_summary(v: &str) -> Result<Option<u64>, DirectiveError> {
    if v == "off" {
        return Ok(None);
    }
    read(v, values::parse_log_summary).map(Some)
}

/// `pow_shield_fail local | open | closed [trusted=<value>]`: the policy
/// and the text of `trusted=`, for the module to compile.
pub fn fail<'a>(args: &[&'a str]) -> Result<(FailPolicy, Option<&'a str>), DirectiveError> {
    let policy = read(first(args), values::parse_fail_policy)?;
    let Some(&extra) = args.get(1) else {
        return Ok((policy, None));
    };
    let Some(value) = extra.strip_prefix("trusted=") else {
        return Err(DirectiveError::invalid(
            extra,
            "expected \"trusted=<value>\"",
        ));
    };
    if policy != FailPolicy::Closed {
        return Err(DirectiveError::invalid(
            extra,
            "\"trusted=\" only goes with \"closed\"",
        ));
    }
    if value.is_empty() {
        return Err(DirectiveError::invalid(extra, "\"trusted=\" needs a value"));
    }
    Ok((policy, Some(value)))
}

/// `pow_shield_secret <key>`. The refusal never shows the key.
pub fn secret(v: &str) -> Result<SecretKeys, DirectiveError> {
    let current = Secret::new(v.as_bytes()).map_err(|e| DirectiveError::invalid("...", e))?;
    Ok(SecretKeys {
        current,
        previous: None,
    })
}

/// The keys of `pow_shield_secret_file <v>`, read from `path` (the file's
/// name resolved against the prefix). The refusal never shows a key.
pub fn secret_file(v: &str, path: &str, contents: &[u8]) -> Result<SecretKeys, DirectiveError> {
    SecretKeys::from_file_contents(contents)
        .map_err(|e| DirectiveError::invalid(v, format_args!("\"{path}\": {e}")))
}

/// `pow_shield_zone <size>`, at least `min` bytes.
pub fn zone_size(v: &str, min: usize) -> Result<usize, DirectiveError> {
    let size = read(v, syntax::parse_size)?;
    if size < min {
        return Err(DirectiveError::invalid(
            v,
            format_args!("the zone needs at least {}k", min / 1024),
        ));
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::MAX_LIMITS;

    /// The word a refusal names.
    fn named<T: core::fmt::Debug>(result: Result<T, DirectiveError>) -> String {
        match result {
            Err(DirectiveError::Invalid { value, .. }) => value,
            other => panic!("expected an invalid value, got {other:?}"),
        }
    }

    const TEN_A_MINUTE: RateLimit = RateLimit {
        requests: 10,
        window_ms: 60_000,
    };

    fn line(limit: RateLimit, approx: bool, name: Option<&str>) -> Option<LimitLine<'static>> {
        Some(LimitLine {
            limit,
            approx,
            name: name.map(|n| LimitName::new(n).unwrap()),
            key: None,
        })
    }

    #[test]
    fn limit_reads_a_key_after_the_name_and_refuses_an_empty_one() {
        let keyed = limit(&["10", "1m", "approx", "name=net", "key=$pow_shield_net"]);
        let line = keyed.unwrap().unwrap();
        assert_eq!((line.approx, line.key), (true, Some("$pow_shield_net")));
        assert_eq!(
            limit(&["10", "1m", "key=site"]).unwrap().unwrap().key,
            Some("site")
        );
        assert_eq!(named(limit(&["10", "1m", "key="])), "key=");
        assert_eq!(named(limit(&["10", "1m", "key=\"\""])), "key=\"\"");
        assert_eq!(named(limit(&["10", "1m", "key=a", "key=b"])), "key=b");
    }

    #[test]
    fn limit_options_come_in_any_order_each_once() {
        let written = limit(&["10", "1m", "approx", "name=net", "key=$net"]);
        for order in [
            ["key=$net", "name=net", "approx"],
            ["name=net", "approx", "key=$net"],
            ["approx", "key=$net", "name=net"],
        ] {
            let args = ["10", "1m", order[0], order[1], order[2]];
            assert_eq!(limit(&args), written, "{order:?}");
        }
        assert_eq!(named(limit(&["10", "1m", "approx", "approx"])), "approx");
        assert_eq!(
            named(limit(&["10", "1m", "key=a", "name=b", "key=c"])),
            "key=c"
        );
    }

    #[test]
    fn two_limits_with_the_same_numbers_and_key_are_refused_at_the_key() {
        let keyed = |name, key| {
            Some(LimitLine {
                key: Some(key),
                ..line(TEN_A_MINUTE, false, Some(name)).unwrap()
            })
        };
        let mut slot = None;
        stack_limit(&mut slot, line(TEN_A_MINUTE, false, None), &[]).unwrap();
        stack_limit(&mut slot, keyed("net", "$pow_shield_net"), &[]).unwrap();
        let args = ["10", "1m", "name=again", "key=$pow_shield_net"];
        assert_eq!(
            named(stack_limit(
                &mut slot,
                keyed("again", "$pow_shield_net"),
                &args
            )),
            "key=$pow_shield_net"
        );
        stack_limit(&mut slot, keyed("site", "site"), &[]).unwrap();
        assert_eq!(slot.unwrap().unwrap().len(), 3);
    }

    #[test]
    fn limit_reads_requests_window_approx_and_name() {
        assert_eq!(limit(&["10", "1m"]), Ok(line(TEN_A_MINUTE, false, None)));
        assert_eq!(
            limit(&["10", "1m", "approx"]),
            Ok(line(TEN_A_MINUTE, true, None))
        );
        assert_eq!(
            limit(&["10", "1m", "name=burst"]),
            Ok(line(TEN_A_MINUTE, false, Some("burst")))
        );
        assert_eq!(
            limit(&["10", "1m", "approx", "name=burst"]),
            Ok(line(TEN_A_MINUTE, true, Some("burst")))
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
        assert_eq!(named(limit(&["10", "1m", "name="])), "name=");
        assert_eq!(named(limit(&["10", "1m", "name=a b"])), "name=a b");
        assert_eq!(named(limit(&["10", "1m", "name=a", "name=b"])), "name=b");
        assert_eq!(named(limit(&["10", "1m", "name=a", "bogus"])), "bogus");
        // A bad count before a bad option: the count is named first.
        assert_eq!(named(limit(&["0", "1m", "bogus"])), "0");
        // Both wrong: the count is named first.
        assert_eq!(named(limit(&["0", "abc"])), "0");
    }

    #[test]
    fn limit_lines_of_one_context_stack_in_order() {
        let hourly = RateLimit {
            requests: 1000,
            window_ms: 3_600_000,
        };
        let mut slot = None;
        stack_limit(&mut slot, line(TEN_A_MINUTE, false, Some("burst")), &[]).unwrap();
        stack_limit(&mut slot, line(hourly, false, None), &[]).unwrap();
        let limits = slot.unwrap().unwrap();
        assert_eq!(limits.rates().collect::<Vec<_>>(), [TEN_A_MINUTE, hourly]);
        assert_eq!(
            (limits.name(0).as_str(), limits.name(1).as_str()),
            ("burst", "1000r/h")
        );
    }

    #[test]
    fn stacked_limit_lines_refuse_off_the_same_limit_and_a_taken_name() {
        let other = RateLimit {
            requests: 5,
            window_ms: 1_000,
        };
        let mut slot = None;
        let args = ["10", "1m", "name=burst"];
        stack_limit(&mut slot, line(TEN_A_MINUTE, false, Some("burst")), &args).unwrap();
        let refused = |line, args: &[&str]| named(stack_limit(&mut slot.clone(), line, args));
        assert_eq!(
            refused(
                line(other, false, Some("burst")),
                &["5", "1s", "name=burst"]
            ),
            "name=burst"
        );
        // The same numbers counted another way would share the zone's
        // count in local mode.
        assert_eq!(
            refused(line(TEN_A_MINUTE, true, None), &["10", "1m", "approx"]),
            "10"
        );
        assert_eq!(refused(None, &["off"]), "off");
        let mut off = Some(None);
        assert_eq!(
            named(stack_limit(
                &mut off,
                line(other, false, None),
                &["5", "1s"]
            )),
            "5"
        );
    }

    #[test]
    fn approx_and_exact_lines_stack_in_one_context_each_counting_its_own_way() {
        let hourly = RateLimit {
            requests: 1000,
            window_ms: 3_600_000,
        };
        let hundred = RateLimit {
            requests: 100,
            window_ms: 60_000,
        };
        let mut slot = None;
        let lines = [
            limit(&["100", "1m", "approx"]),
            limit(&["1000", "1h"]),
            limit(&["40", "1h", "key=$pow_shield_net", "name=net", "approx"]),
        ];
        for line in lines {
            stack_limit(&mut slot, line.unwrap(), &[]).unwrap();
        }
        let limits = slot.unwrap().unwrap();
        let each: Vec<_> = limits
            .as_slice()
            .iter()
            .map(|l| (l.rate, l.approx, l.is_keyed(), l.name().to_string()))
            .collect();
        let net = RateLimit {
            requests: 40,
            window_ms: 3_600_000,
        };
        assert_eq!(
            each,
            [
                (hundred, true, false, "100r/m".to_owned()),
                (hourly, false, false, "1000r/h".to_owned()),
                (net, true, true, "net".to_owned()),
            ]
        );
    }

    #[test]
    fn every_order_of_a_limits_options_reads_the_same_limit() {
        let options = ["key=$pow_shield_net", "name=net", "approx"];
        let written = limit(&["40", "1h", options[0], options[1], options[2]])
            .unwrap()
            .unwrap()
            .limit();
        for [a, b, c] in [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ] {
            let args = ["40", "1h", options[a], options[b], options[c]];
            let read = limit(&args).unwrap().unwrap().limit();
            assert_eq!(read, written, "{args:?}");
        }
        assert!(written.approx && written.is_keyed());
        assert_eq!(written.key, Some(KeyId::of("$pow_shield_net")));
    }

    #[test]
    fn a_context_takes_max_limits_lines_and_refuses_the_next_at_its_count() {
        const { assert!(MAX_LIMITS >= 8) };
        let mut slot = None;
        for requests in 1..=MAX_LIMITS {
            let n = requests.to_string();
            let line = limit(&[n.as_str(), "1m"]).unwrap();
            stack_limit(&mut slot, line, &[n.as_str(), "1m"]).unwrap();
        }
        let next = limit(&["99", "1m"]).unwrap();
        match stack_limit(&mut slot, next, &["99", "1m"]) {
            Err(DirectiveError::Invalid { value, reason }) => {
                assert_eq!(value, "99");
                assert_eq!(
                    reason,
                    format!("at most {MAX_LIMITS} \"pow_shield_limit\" lines in one context")
                );
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(slot.unwrap().unwrap().len(), MAX_LIMITS);
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
            Err(DirectiveError::invalid("0", "must be between 1s and 1d"))
        );
        assert_eq!(named(challenge_ttl("999ms")), "999ms");
        assert_eq!(named(challenge_ttl("abc")), "abc");
    }

    #[test]
    fn log_summary_is_an_interval_from_1s_to_1h_or_off() {
        assert_eq!(log_summary("10s"), Ok(Some(10_000)));
        assert_eq!(log_summary("1s"), Ok(Some(1_000)));
        assert_eq!(log_summary("1h"), Ok(Some(3_600_000)));
        assert_eq!(log_summary("off"), Ok(None));
        assert_eq!(named(log_summary("500ms")), "500ms");
        assert_eq!(named(log_summary("2h")), "2h");
        assert_eq!(named(log_summary("often")), "often");
    }

    #[test]
    fn log_levels_are_four_lower_case_words() {
        assert_eq!(log_level("info"), Ok(LogLevel::Info));
        assert_eq!(log_level("notice"), Ok(LogLevel::Notice));
        assert_eq!(log_level("warn"), Ok(LogLevel::Warn));
        assert_eq!(log_level("error"), Ok(LogLevel::Error));
        assert_eq!(
            log_level("loud"),
            Err(DirectiveError::invalid(
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
        let Err(DirectiveError::Invalid { value, reason }) = refusal else {
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
            Err(DirectiveError::invalid("1k", "the zone needs at least 32k"))
        );
        assert_eq!(named(zone_size("abc", 32_768)), "abc");
    }
}

//! The options the subcommands share: the solver's (`--threads`,
//! `--max-solve-time`, `get`'s `--max-difficulty`) and durations in seconds.

use std::time::Duration;

use clap::{value_parser, Arg, ArgMatches};
use pow_shield_client::{SolveOptions, DEFAULT_MAX_SOLVE_TIME};

/// `--max-solve-time`'s default: the library's [`DEFAULT_MAX_SOLVE_TIME`]
/// (a hostile server's forged difficulty 12 would take months).
pub const MAX_SOLVE_TIME_DEFAULT: &str = "30";

/// `--retries`' default: the library's `Policy::default().max_retries`,
/// the same number as the Python and Node clients'.
pub const DEFAULT_RETRIES: &str = "5";

pub fn threads() -> Arg {
    Arg::new("threads")
        .long("threads")
        .value_name("N")
        .value_parser(value_parser!(usize))
        .help("Solver threads [default: one per core]")
}

pub fn max_solve_time() -> Arg {
    Arg::new("max-solve-time")
        .long("max-solve-time")
        .value_name("SECONDS")
        .value_parser(seconds)
        .default_value(MAX_SOLVE_TIME_DEFAULT)
        .help("Give up on one challenge after this long (exit 113); 0: no limit")
}

/// A duration in seconds, refused (exit 2) unless a `Duration` holds it: a
/// negative, NaN or astronomically large value is a mistake, not a limit.
pub fn seconds(text: &str) -> Result<Duration, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(value)
        .map_err(|_| format!("{text} s is out of range (0 to {} s)", u64::MAX))
}

pub fn solve_options(m: &ArgMatches) -> SolveOptions {
    SolveOptions {
        threads: m.get_one::<usize>("threads").copied().unwrap_or(0),
        max_difficulty: m
            .try_get_one::<u8>("max-difficulty")
            .ok()
            .flatten()
            .copied(),
        // 0: no limit. (`bench` has no such option.)
        max_solve_time: match m.try_get_one::<Duration>("max-solve-time") {
            Ok(Some(t)) if t.is_zero() => None,
            Ok(Some(t)) => Some(*t),
            _ => Some(DEFAULT_MAX_SOLVE_TIME),
        },
        progress: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{get_matches, parse};

    #[test]
    fn limits_are_parsed_into_the_solve_options() {
        let m = get_matches(&[
            "get",
            "http://h/",
            "--max-difficulty",
            "5",
            "--max-solve-time",
            "1.5",
            "--threads",
            "3",
        ]);
        let o = solve_options(&m);
        assert_eq!(o.max_difficulty, Some(5));
        assert_eq!(o.max_solve_time, Some(Duration::from_millis(1500)));
        assert_eq!(o.threads, 3);
    }

    #[test]
    fn retries_default_to_the_librarys_policy() {
        assert_eq!(
            DEFAULT_RETRIES.parse::<u32>().unwrap(),
            pow_shield_client::Policy::default().max_retries
        );
    }

    #[test]
    fn max_solve_time_is_the_librarys_30_s_by_default_and_0_is_no_limit() {
        assert_eq!(
            Duration::from_secs(MAX_SOLVE_TIME_DEFAULT.parse().unwrap()),
            DEFAULT_MAX_SOLVE_TIME
        );
        let default = Some(Duration::from_secs(30));
        assert_eq!(
            solve_options(&get_matches(&["get", "http://h/"])).max_solve_time,
            default
        );
        let solve = parse(&["solve", "a.b"]).unwrap();
        let solve = solve.subcommand_matches("solve").unwrap();
        assert_eq!(solve_options(solve).max_solve_time, default);
        let m = get_matches(&["get", "http://h/", "--max-solve-time", "0"]);
        assert_eq!(solve_options(&m).max_solve_time, None);
        let bench = parse(&["bench"]).unwrap();
        let bench = bench.subcommand_matches("bench").unwrap();
        assert_eq!(solve_options(bench).max_solve_time, default);
    }

    #[test]
    fn durations_a_duration_cannot_hold_are_usage_errors() {
        for opt in ["--max-solve-time", "--connect-timeout", "--max-time"] {
            for bad in ["1e30", "-1", "NaN", "inf", "soon"] {
                assert!(
                    parse(&["get", "http://h/", opt, bad]).is_err(),
                    "{opt} {bad}"
                );
            }
        }
        assert!(parse(&[
            "solve",
            "--salt",
            "a",
            "--difficulty",
            "1",
            "--max-solve-time",
            "1e30"
        ])
        .is_err());
        assert!(parse(&["bench", "--seconds", "1e30"]).is_err());
    }
}

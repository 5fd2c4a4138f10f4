//! `pow-shield`: a curl-like client that pays pow-shield's proof-of-work
//! challenges, a solver and a benchmark. See `pow-shield --help`.
//!
//! One file per subcommand, each with its options and what it does: `get`,
//! `solve`, `bench`, `bot-key` and `bot-keys` (in `bot`), `admin`, `asn-geo`; `args` holds the options they share and `exit` the
//! exit codes.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{ArgMatches, Command};

mod admin;
mod args;
mod asn_geo;
mod bench;
mod bot;
mod exit;
mod get;
mod replace;
mod solve;
mod write_out;

fn cli() -> Command {
    Command::new("pow-shield")
        .version(env!("CARGO_PKG_VERSION"))
        .about("Client for APIs behind pow-shield: pays proof-of-work challenges")
        .after_help(exit::EXIT_CODES)
        .subcommand_required(true)
        .arg_required_else_help(true)
        .subcommand(get::command())
        .subcommand(solve::command())
        .subcommand(bench::command())
        .subcommand(bot::key_command())
        .subcommand(bot::keys_command())
        .subcommand(admin::command())
        .subcommand(asn_geo::command())
}

/// A usage error's exit: 2, or 0 for `--help` and `--version`.
fn usage(e: &clap::Error) -> ExitCode {
    let _ = e.print();
    ExitCode::from(if e.use_stderr() {
        exit::USAGE
    } else {
        exit::OK
    })
}

/// `get`'s sets of URLs and options, split at each `--next` (as curl's):
/// each set is parsed as a `get` command line of its own.
fn get_sets(args: &[OsString]) -> Result<Vec<ArgMatches>, clap::Error> {
    args[2..]
        .split(|a| a == "--next")
        .map(|set| {
            let argv = args[..2].iter().chain(set);
            let m = cli().try_get_matches_from(argv)?;
            Ok(m.subcommand_matches("get").cloned().unwrap_or_default())
        })
        .collect()
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.len() > 2 && args[1] == "get" && args[2..].iter().any(|a| a == "--next") {
        return match get_sets(&args) {
            Ok(sets) => ExitCode::from(get::run_sets(&sets)),
            Err(e) => usage(&e),
        };
    }
    let matches = match cli().try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) => return usage(&e),
    };
    let code = match matches.subcommand() {
        Some(("get", m)) => get::run_sets(std::slice::from_ref(m)),
        Some(("solve", m)) => solve::run(m),
        Some(("bench", m)) => bench::run(m),
        Some(("bot-key", m)) => bot::run_key(m),
        Some(("bot-keys", m)) => bot::run_keys(m),
        Some(("admin", m)) => admin::run(m),
        Some(("asn-geo", m)) => asn_geo::run(m),
        _ => exit::USAGE,
    };
    ExitCode::from(code)
}

/// The command line as the subcommands' tests parse it.
#[cfg(test)]
mod testing {
    use clap::ArgMatches;

    pub fn parse(args: &[&str]) -> Result<ArgMatches, clap::Error> {
        super::cli().try_get_matches_from(std::iter::once("pow-shield").chain(args.iter().copied()))
    }

    pub fn get_matches(args: &[&str]) -> ArgMatches {
        let m = parse(args).unwrap();
        m.subcommand_matches("get").unwrap().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_definition_is_consistent() {
        cli().debug_assert();
    }

    fn argv(args: &[&str]) -> Vec<OsString> {
        std::iter::once("pow-shield")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect()
    }

    #[test]
    fn next_splits_get_into_sets_with_options_of_their_own() {
        let sets = get_sets(&argv(&[
            "get",
            "-H",
            "A: 1",
            "http://h/a",
            "http://h/b",
            "--next",
            "--pace",
            "http://h/c",
        ]))
        .unwrap();
        let urls = |m: &ArgMatches| -> Vec<String> {
            m.get_many::<String>("url")
                .into_iter()
                .flatten()
                .cloned()
                .collect()
        };
        assert_eq!(sets.len(), 2);
        assert_eq!(urls(&sets[0]), ["http://h/a", "http://h/b"]);
        assert_eq!(urls(&sets[1]), ["http://h/c"]);
        assert!(sets[0].get_many::<String>("header").is_some());
        assert!(
            sets[1].get_many::<String>("header").is_none(),
            "not carried over"
        );
        assert!(!sets[0].get_flag("pace") && sets[1].get_flag("pace"));
    }

    #[test]
    fn a_set_without_a_url_is_a_usage_error() {
        assert!(get_sets(&argv(&["get", "http://h/a", "--next"])).is_err());
        assert!(get_sets(&argv(&["get", "--next", "http://h/a"])).is_err());
    }
}

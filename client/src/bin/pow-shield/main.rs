//! `pow-shield`: a curl-like client that pays pow-shield's proof-of-work
//! challenges, a solver and a benchmark. See `pow-shield --help`.
//!
//! One file per subcommand, each with its options and what it does: `get`,
//! `solve`, `bench`, `bot-key` and `bot-keys` (in `bot`), `admin`; `args` holds the options they share and `exit` the
//! exit codes.

use std::process::ExitCode;

use clap::Command;

mod admin;
mod args;
mod bench;
mod bot;
mod exit;
mod get;
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
}

fn main() -> ExitCode {
    let matches = match cli().try_get_matches() {
        Ok(m) => m,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    let code = match matches.subcommand() {
        Some(("get", m)) => get::run(m),
        Some(("solve", m)) => solve::run(m),
        Some(("bench", m)) => bench::run(m),
        Some(("bot-key", m)) => bot::run_key(m),
        Some(("bot-keys", m)) => bot::run_keys(m),
        Some(("admin", m)) => admin::run(m),
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
}

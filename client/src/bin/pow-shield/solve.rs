//! `pow-shield solve`: solve one challenge (a token, or a salt and a
//! difficulty in hex digits or bits) and print the nonce; for an Equi-X
//! token (`alg` equix), the nonce and the `X-PoW-Solution` value on one
//! line, separated by a space.

use clap::{value_parser, Arg, ArgMatches, Command};
use std::sync::atomic::AtomicBool;

use pow_shield_client::{solve, solve_bits, solve_work_until, Proof};
use pow_shield_protocol::{MAX_BITS, MAX_DIFFICULTY, MIN_BITS, MIN_DIFFICULTY};

use crate::args::{max_solve_time, solve_options, threads};
use crate::exit::{self, error_code};

pub fn command() -> Command {
    Command::new("solve")
        .about(
            "Solve a challenge and print the nonce (an Equi-X token's: the nonce and the solution)",
        )
        .arg(
            Arg::new("token")
                .required_unless_present("salt")
                .conflicts_with("salt")
                .help("The X-PoW-Challenge token"),
        )
        .arg(
            Arg::new("salt")
                .long("salt")
                .value_name("S")
                .required_unless_present("token")
                .requires("price"),
        )
        .group(clap::ArgGroup::new("price").args(["difficulty", "bits"]))
        .arg(
            Arg::new("bits")
                .long("bits")
                .value_name("B")
                .value_parser(value_parser!(u8).range(i64::from(MIN_BITS)..=i64::from(MAX_BITS)))
                .requires("salt")
                .help("Leading zero bits (X-PoW-Bits)"),
        )
        .arg(
            Arg::new("difficulty")
                .long("difficulty")
                .value_name("D")
                // What the protocol accepts: 0 is no work, 13+ is never issued.
                .value_parser(
                    value_parser!(u8).range(i64::from(MIN_DIFFICULTY)..=i64::from(MAX_DIFFICULTY)),
                )
                .requires("salt")
                .help("Leading hex zeros (X-PoW-Difficulty): 4 bits each"),
        )
        .arg(max_solve_time())
        .arg(threads())
}

pub fn run(m: &ArgMatches) -> u8 {
    let opts = solve_options(m);
    let solved = match m.get_one::<String>("token") {
        Some(token) => match pow_shield_protocol::read_unverified(token.trim()) {
            Some(info) if (MIN_BITS..=MAX_BITS).contains(&info.bits) => {
                let never = AtomicBool::new(false);
                solve_work_until(&info.salt, info.bits, info.work, &opts, &never)
            }
            Some(info) => {
                eprintln!(
                    "pow-shield: the token asks for {} bits, outside {MIN_BITS}..={MAX_BITS}",
                    info.bits
                );
                return exit::BAD_REQUEST;
            }
            None => {
                eprintln!("pow-shield: not a challenge token: {token}");
                return exit::BAD_REQUEST;
            }
        },
        None => {
            let salt = m.get_one::<String>("salt").cloned().unwrap_or_default();
            match m.get_one::<u8>("bits") {
                Some(bits) => solve_bits(&salt, *bits, &opts).map(Proof::from),
                None => {
                    let hex = m.get_one::<u8>("difficulty").copied().unwrap_or(0);
                    solve(&salt, hex, &opts).map(Proof::from)
                }
            }
        }
    };
    match solved {
        Ok(proof) => {
            let line: Vec<String> = proof.headers().into_iter().map(|(_, v)| v).collect();
            println!("{}", line.join(" "));
            exit::OK
        }
        Err(e) => {
            eprintln!("pow-shield: {e}");
            error_code(&e)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::parse;

    #[test]
    fn solve_takes_a_token_or_salt_and_difficulty_not_both() {
        assert!(parse(&["solve", "a.b"]).is_ok());
        assert!(parse(&["solve", "--salt", "ab", "--difficulty", "3"]).is_ok());
        assert!(parse(&["solve", "--salt", "ab"]).is_err());
        assert!(parse(&["solve"]).is_err());
        assert!(parse(&["solve", "a.b", "--salt", "ab", "--difficulty", "3"]).is_err());
        assert!(parse(&["solve", "--salt", "ab", "--bits", "13"]).is_ok());
        assert!(parse(&["solve", "--salt", "ab", "--bits", "13", "--difficulty", "3"]).is_err());
        assert!(parse(&["solve", "--bits", "13"]).is_err());
    }

    #[test]
    fn solve_refuses_a_difficulty_the_protocol_refuses() {
        for bad in ["0", "13", "64", "-1"] {
            assert!(
                parse(&["solve", "--salt", "ab", "--difficulty", bad]).is_err(),
                "{bad}"
            );
        }
        for good in ["1", "12"] {
            assert!(
                parse(&["solve", "--salt", "ab", "--difficulty", good]).is_ok(),
                "{good}"
            );
        }
        for bad in ["0", "49"] {
            assert!(
                parse(&["solve", "--salt", "ab", "--bits", bad]).is_err(),
                "{bad}"
            );
        }
        assert!(parse(&["solve", "--salt", "ab", "--bits", "48"]).is_ok());
    }
}

//! Exit codes: curl's where the meaning is the same (a script written for
//! curl reads them right), 110-114 for what only a paying client meets
//! (curl has used 1-101; 126 and up belong to the shell).

use pow_shield_client::Error;

pub const OK: u8 = 0;
pub const FAILED: u8 = 1;
pub const USAGE: u8 = 2;
pub const BAD_REQUEST: u8 = 3;
pub const RESOLVE_PROXY: u8 = 5;
pub const RESOLVE: u8 = 6;
pub const CONNECT: u8 = 7;
pub const HTTP_ERROR: u8 = 22;
pub const WRITE: u8 = 23;
pub const READ: u8 = 26;
pub const TIMED_OUT: u8 = 28;
pub const TLS: u8 = 35;
pub const TOO_MANY_REDIRECTS: u8 = 47;
pub const EMPTY_REPLY: u8 = 52;
pub const TRANSPORT: u8 = 56;
pub const CERTIFICATE: u8 = 60;
pub const CACERT: u8 = 77;
pub const BLOCKED: u8 = 110;
pub const BANNED: u8 = 111;
pub const TOO_HARD: u8 = 112;
pub const SOLVE_TIMEOUT: u8 = 113;
pub const GAVE_UP: u8 = 114;

pub const EXIT_CODES: &str = "\
Exit codes (curl's where the meaning is the same; 110-114 are pow-shield's own):
    0  a response that is not a challenge was received (any status, as curl)
    1  other failure
    2  bad command line
    3  bad URL or header
    5  the proxy's host name did not resolve (-x)
    6  the host name did not resolve
    7  could not connect
   22  HTTP status >= 400 with -f/--fail (no body written) or --fail-with-body
   23  could not write the output (-o, -O)
   26  could not read the request body or -w format (-d @file, -w @file)
   28  timed out: --connect-timeout or -m/--max-time ran out
   35  TLS handshake failed (https://)
   47  more than 50 redirects with -L
   52  the server closed the connection without a response (e.g. 444)
   56  other network failure
   60  the server's TLS certificate could not be verified (unknown CA, expired,
       or not for this host name): see --cacert and -k
   77  could not read the CA certificates of --cacert
  110  blocked by the circuit breaker (X-PoW-Shield: blocked): wait, paying does not help
  111  banned (X-PoW-Shield: banned)
  112  challenge harder than --max-difficulty (nothing sent after it)
  113  no solution within --max-solve-time (30 s unless told; 0: no limit)
  114  still challenged after --retries, or an unreadable/unsolvable challenge
With several URLs the exit code is the last one's, as in curl.";

pub fn error_code(e: &Error) -> u8 {
    match e {
        Error::Blocked { .. } => BLOCKED,
        Error::Banned { .. } => BANNED,
        Error::TooHard { .. } => TOO_HARD,
        Error::Timeout { .. } => SOLVE_TIMEOUT,
        Error::GaveUp { .. }
        | Error::BadChallenge(_)
        | Error::Unsolvable { .. }
        | Error::UnsupportedWork { .. } => GAVE_UP,
        Error::Closed => EMPTY_REPLY,
        Error::Resolve(_) => RESOLVE,
        Error::Connect(_) => CONNECT,
        Error::TimedOut(_) => TIMED_OUT,
        Error::Request(_) => BAD_REQUEST,
        Error::Transport(_) => TRANSPORT,
        Error::Certificate(_) => CERTIFICATE,
        Error::Tls(_) => TLS,
        Error::CaCert(_) => CACERT,
        _ => FAILED,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_clients_doc_table_has_every_code_of_the_help() {
        let doc = include_str!("../../../../docs/clients.md");
        let codes: Vec<&str> = EXIT_CODES
            .lines()
            .filter_map(|l| l.trim_start().split_once("  "))
            .map(|(code, _)| code)
            .filter(|code| code.parse::<u8>().is_ok())
            .collect();
        assert!(codes.len() >= 20, "{codes:?}");
        for code in codes {
            assert!(
                doc.contains(&format!("\n| {code} | ")),
                "docs/clients.md lacks exit code {code}"
            );
        }
    }

    #[test]
    fn our_own_codes_are_none_of_curls() {
        // curl's exit codes run from 1 to 101 (CURLE_ECH_REQUIRED, 8.8).
        for code in [BLOCKED, BANNED, TOO_HARD, SOLVE_TIMEOUT, GAVE_UP] {
            assert!((102..126).contains(&code), "{code}");
        }
    }

    #[test]
    fn every_error_has_its_documented_exit_code() {
        let cases = [
            (Error::Blocked { status: 403 }, 110),
            (Error::Banned { status: 403 }, 111),
            (
                Error::TooHard {
                    difficulty: 9,
                    max: 4,
                },
                112,
            ),
            (
                Error::Timeout {
                    difficulty: 9,
                    after: Duration::ZERO,
                },
                113,
            ),
            (Error::GaveUp { attempts: 5 }, 114),
            (Error::Resolve(String::new()), 6),
            (Error::Closed, 52),
            (Error::Connect(String::new()), 7),
            (Error::TimedOut(String::new()), 28),
            (Error::Tls(String::new()), 35),
            (Error::Certificate(String::new()), 60),
            (Error::CaCert(String::new()), 77),
        ];
        for (e, code) in cases {
            assert_eq!(error_code(&e), code, "{e:?}");
            assert!(
                EXIT_CODES.contains(&format!("\n{code:>5}  ")),
                "{code} undocumented"
            );
        }
    }
}

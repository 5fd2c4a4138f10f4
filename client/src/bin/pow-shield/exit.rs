//! Exit codes; curl's where curl has one, 90+ for what only a paying
//! client meets.

use pow_shield_client::Error;

pub const OK: u8 = 0;
pub const FAILED: u8 = 1;
pub const USAGE: u8 = 2;
pub const BAD_REQUEST: u8 = 3;
pub const CONNECT: u8 = 7;
pub const HTTP_ERROR: u8 = 22;
pub const WRITE: u8 = 23;
pub const TIMED_OUT: u8 = 28;
pub const TLS: u8 = 35;
pub const EMPTY_REPLY: u8 = 52;
pub const TRANSPORT: u8 = 56;
pub const CERTIFICATE: u8 = 60;
pub const CACERT: u8 = 77;
pub const BLOCKED: u8 = 90;
pub const BANNED: u8 = 91;
pub const TOO_HARD: u8 = 92;
pub const SOLVE_TIMEOUT: u8 = 93;
pub const GAVE_UP: u8 = 94;

pub const EXIT_CODES: &str = "\
Exit codes:
   0  a response that is not a challenge was received (any status, as curl)
   1  other failure (e.g. reading -d @file)
   2  bad command line
   3  bad URL or header
   7  could not connect
  22  HTTP status >= 400 with -f/--fail
  23  could not write the output (-o)
  28  timed out: --connect-timeout or --max-time ran out
  35  TLS handshake failed (https://)
  52  the server closed the connection without a response (e.g. 444)
  56  other network failure
  60  the server's TLS certificate could not be verified (unknown CA, expired,
      or not for this host name): see --cacert and -k
  77  could not read the CA certificates of --cacert
  90  blocked by the circuit breaker (X-PoW-Shield: blocked): wait, paying does not help
  91  banned (X-PoW-Shield: banned)
  92  challenge harder than --max-difficulty (nothing sent after it)
  93  no solution within --max-solve-time (30 s unless told; 0: no limit)
  94  still challenged after --retries, or an unreadable/unsolvable challenge";

pub fn error_code(e: &Error) -> u8 {
    match e {
        Error::Blocked { .. } => BLOCKED,
        Error::Banned { .. } => BANNED,
        Error::TooHard { .. } => TOO_HARD,
        Error::Timeout { .. } => SOLVE_TIMEOUT,
        Error::GaveUp { .. } | Error::BadChallenge(_) | Error::Unsolvable { .. } => GAVE_UP,
        Error::Closed => EMPTY_REPLY,
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
    fn every_error_has_its_documented_exit_code() {
        let cases = [
            (Error::Blocked { status: 403 }, 90),
            (Error::Banned { status: 403 }, 91),
            (
                Error::TooHard {
                    difficulty: 9,
                    max: 4,
                },
                92,
            ),
            (
                Error::Timeout {
                    difficulty: 9,
                    after: Duration::ZERO,
                },
                93,
            ),
            (Error::GaveUp { attempts: 5 }, 94),
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
                EXIT_CODES.contains(&format!("  {code}  ")),
                "{code} undocumented"
            );
        }
    }
}

//! `pow-shield`: a curl-like client that pays pow-shield's proof-of-work
//! challenges, a solver and a benchmark. See `pow-shield --help`.

use std::io::{self, Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{value_parser, Arg, ArgAction, ArgMatches, Command};
use pow_shield_client::blocking::{Client, Event, Request, Timeouts, Trust};
use pow_shield_client::{hash_rate, solve, Error, Policy, SolveOptions, DEFAULT_MAX_SOLVE_TIME};

/// Exit codes; curl's where curl has one, 90+ for what only a paying
/// client meets.
mod exit {
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
}

const EXIT_CODES: &str = "\
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

/// `--max-solve-time`'s default: the library's [`DEFAULT_MAX_SOLVE_TIME`]
/// (a hostile server's forged difficulty 12 would take months).
const MAX_SOLVE_TIME_DEFAULT: &str = "30";

fn cli() -> Command {
    let threads = Arg::new("threads")
        .long("threads")
        .value_name("N")
        .value_parser(value_parser!(usize))
        .help("Solver threads [default: one per core]");
    let max_solve_time = Arg::new("max-solve-time")
        .long("max-solve-time")
        .value_name("SECONDS")
        .value_parser(seconds)
        .default_value(MAX_SOLVE_TIME_DEFAULT)
        .help("Give up on one challenge after this long (exit 93); 0: no limit");
    Command::new("pow-shield")
        .version(env!("CARGO_PKG_VERSION"))
        .about("Client for APIs behind pow-shield: pays proof-of-work challenges")
        .after_help(EXIT_CODES)
        .subcommand_required(true)
        .arg_required_else_help(true)
        .subcommand(
            Command::new("get")
                .about("Send a request (curl-like), solving challenges and retrying")
                .after_help(EXIT_CODES)
                .arg(
                    Arg::new("url")
                        .required(true)
                        .help("http:// or https:// URL (https: the certificate is verified against the system's CA store)"),
                )
                .arg(
                    Arg::new("request")
                        .short('X')
                        .long("request")
                        .value_name("METHOD")
                        .help("Method [default: GET, or POST with -d]"),
                )
                .arg(
                    Arg::new("header")
                        .short('H')
                        .long("header")
                        .value_name("NAME: VALUE")
                        .action(ArgAction::Append)
                        .help("Request header (repeatable)"),
                )
                .arg(
                    Arg::new("data")
                        .short('d')
                        .long("data")
                        .value_name("DATA")
                        .help("Request body; @file reads a file, @- stdin"),
                )
                .arg(
                    Arg::new("output")
                        .short('o')
                        .long("output")
                        .value_name("FILE")
                        .help("Write the body to FILE instead of stdout"),
                )
                .arg(
                    Arg::new("include")
                        .short('i')
                        .long("include")
                        .action(ArgAction::SetTrue)
                        .help("Include the response's status line and headers in the output"),
                )
                .arg(
                    Arg::new("verbose")
                        .short('v')
                        .long("verbose")
                        .action(ArgAction::SetTrue)
                        .help("Show requests, responses, solves and waits on stderr"),
                )
                .arg(
                    Arg::new("fail")
                        .short('f')
                        .long("fail")
                        .action(ArgAction::SetTrue)
                        .help("Exit 22 on a final HTTP status >= 400"),
                )
                .arg(
                    Arg::new("insecure")
                        .short('k')
                        .long("insecure")
                        .action(ArgAction::SetTrue)
                        .help("https: accept any certificate for any host (still encrypted, not authenticated)"),
                )
                .arg(
                    Arg::new("cacert")
                        .long("cacert")
                        .value_name("FILE")
                        .help("https: trust only the CA certificates in this PEM file instead of the system's store"),
                )
                .arg(
                    Arg::new("max-difficulty")
                        .long("max-difficulty")
                        .value_name("D")
                        .value_parser(value_parser!(u8))
                        .help("Refuse challenges harder than D (exit 92)"),
                )
                .arg(max_solve_time.clone())
                .arg(
                    Arg::new("wait")
                        .long("wait")
                        .action(ArgAction::SetTrue)
                        .help("Sleep Retry-After (429, 503) instead of paying, up to --max-wait"),
                )
                .arg(
                    Arg::new("max-wait")
                        .long("max-wait")
                        .value_name("SECONDS")
                        .value_parser(value_parser!(u64))
                        .default_value("60")
                        .help("Longest Retry-After worth sleeping with --wait"),
                )
                .arg(
                    Arg::new("connect-timeout")
                        .long("connect-timeout")
                        .value_name("SECONDS")
                        .value_parser(seconds)
                        .default_value("10")
                        .help("Longest wait for each connection to open (exit 28)"),
                )
                .arg(
                    Arg::new("max-time")
                        .long("max-time")
                        .value_name("SECONDS")
                        .value_parser(seconds)
                        .help("Longest transfer of each request, connecting to the last byte (exit 28) [default: no limit]"),
                )
                .arg(
                    Arg::new("retries")
                        .long("retries")
                        .value_name("N")
                        .value_parser(value_parser!(u32))
                        .default_value("5")
                        .help("Retries per request (solves and waits)"),
                )
                .arg(threads.clone()),
        )
        .subcommand(
            Command::new("solve")
                .about("Solve a challenge and print the nonce")
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
                        .requires("difficulty"),
                )
                .arg(
                    Arg::new("difficulty")
                        .long("difficulty")
                        .value_name("D")
                        .value_parser(value_parser!(u8))
                        .requires("salt"),
                )
                .arg(max_solve_time)
                .arg(threads.clone()),
        )
        .subcommand(
            Command::new("bench")
                .about("Hashes per second on this machine and the expected solve times")
                .arg(threads)
                .arg(
                    Arg::new("seconds")
                        .long("seconds")
                        .value_name("S")
                        .value_parser(seconds)
                        .default_value("2")
                        .help("Measuring time for each of the two runs"),
                ),
        )
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
        Some(("get", m)) => get(m),
        Some(("solve", m)) => solve_cmd(m),
        Some(("bench", m)) => bench(m),
        _ => exit::USAGE,
    };
    ExitCode::from(code)
}

/// A duration in seconds, refused (exit 2) unless a `Duration` holds it: a
/// negative, NaN or astronomically large value is a mistake, not a limit.
fn seconds(text: &str) -> Result<Duration, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(value)
        .map_err(|_| format!("{text} s is out of range (0 to {} s)", u64::MAX))
}

fn solve_options(m: &ArgMatches) -> SolveOptions {
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

fn get(m: &ArgMatches) -> u8 {
    let verbose = m.get_flag("verbose");
    let policy = Policy {
        solve: solve_options(m),
        prefer_wait: m.get_flag("wait"),
        max_wait: Duration::from_secs(m.get_one::<u64>("max-wait").copied().unwrap_or(60)),
        max_retries: m.get_one::<u32>("retries").copied().unwrap_or(5),
    };
    let req = match build_request(m) {
        Ok(r) => r,
        Err((code, msg)) => {
            eprintln!("pow-shield: {msg}");
            return code;
        }
    };
    let timeouts = Timeouts {
        connect: m.get_one::<Duration>("connect-timeout").copied(),
        transfer: m.get_one::<Duration>("max-time").copied(),
    };
    let client = match trust(m).and_then(|t| {
        Client::with_config(policy, t, timeouts).map_err(|e| (exit::CACERT, e.to_string()))
    }) {
        Ok(c) => c,
        Err((code, msg)) => {
            eprintln!("pow-shield: {msg}");
            return code;
        }
    };
    let mut log = |e: Event| {
        if verbose {
            log_event(&e);
        }
    };
    let mut reply = match client.send(&req, &mut log) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pow-shield: {e}");
            if let Error::Certificate(why) = &e {
                eprintln!("pow-shield: {}", certificate_hint(why));
            }
            return error_code(&e);
        }
    };
    let written = (|| -> io::Result<()> {
        let mut out: Box<dyn Write> = match m.get_one::<String>("output").map(String::as_str) {
            Some("-") | None => Box::new(io::stdout().lock()),
            Some(path) => Box::new(std::fs::File::create(path)?),
        };
        if m.get_flag("include") {
            write!(out, "{} {}", reply.version, reply.status)?;
            if let Some(reason) = reason_phrase(reply.status) {
                write!(out, " {reason}")?;
            }
            write!(out, "\r\n")?;
            for (k, v) in &reply.headers {
                write!(out, "{k}: {v}\r\n")?;
            }
            write!(out, "\r\n")?;
        }
        io::copy(&mut reply.body, &mut out)?;
        out.flush()
    })();
    if let Err(e) = written {
        // ureq reports a --max-time running out mid-body as a read error.
        if e.kind() == io::ErrorKind::TimedOut {
            eprintln!("pow-shield: reading the response: {e}");
            return exit::TIMED_OUT;
        }
        eprintln!("pow-shield: writing the response: {e}");
        return exit::WRITE;
    }
    if m.get_flag("fail") && reply.status >= 400 {
        eprintln!("pow-shield: the server answered HTTP {}", reply.status);
        return exit::HTTP_ERROR;
    }
    exit::OK
}

fn reason_phrase(status: u16) -> Option<&'static str> {
    ureq::http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
}

/// What to do about a rejected certificate, from OpenSSL's reason.
fn certificate_hint(why: &str) -> &'static str {
    if why.contains("mismatch") {
        "the certificate is for another host name; \
         to skip verification (not recommended), use -k/--insecure"
    } else {
        "to trust the server's CA, give it with --cacert FILE; \
         to skip verification (not recommended), use -k/--insecure"
    }
}

/// `-k` wins over `--cacert`, as in curl.
fn trust(m: &ArgMatches) -> Result<Trust, (u8, String)> {
    if m.get_flag("insecure") {
        return Ok(Trust::Insecure);
    }
    match m.get_one::<String>("cacert") {
        Some(path) => std::fs::read(path)
            .map(Trust::CaPem)
            .map_err(|e| (exit::CACERT, format!("--cacert {path}: {e}"))),
        None => Ok(Trust::System),
    }
}

fn build_request(m: &ArgMatches) -> Result<Request, (u8, String)> {
    let url = m.get_one::<String>("url").cloned().unwrap_or_default();
    if !url.starts_with("http://") && !url.starts_with("https://") {
        return Err((
            exit::BAD_REQUEST,
            format!("not an http:// or https:// URL: {url}"),
        ));
    }
    let mut headers = Vec::new();
    for h in m.get_many::<String>("header").into_iter().flatten() {
        let Some((name, value)) = h.split_once(':') else {
            return Err((
                exit::BAD_REQUEST,
                format!("header {h:?} is not \"Name: value\""),
            ));
        };
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    let body = match m.get_one::<String>("data") {
        None => None,
        Some(d) => Some(read_data(d).map_err(|e| (exit::FAILED, format!("-d {d}: {e}")))?),
    };
    if body.is_some()
        && !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        // As curl does for -d.
        headers.push((
            "Content-Type".to_owned(),
            "application/x-www-form-urlencoded".to_owned(),
        ));
    }
    let method = match m.get_one::<String>("request") {
        Some(x) => x.clone(),
        None if body.is_some() => "POST".to_owned(),
        None => "GET".to_owned(),
    };
    Ok(Request {
        method,
        url,
        headers,
        body,
    })
}

fn read_data(d: &str) -> io::Result<Vec<u8>> {
    match d.strip_prefix('@') {
        Some("-") => {
            let mut buf = Vec::new();
            io::stdin().read_to_end(&mut buf)?;
            Ok(buf)
        }
        Some(path) => std::fs::read(path),
        None => Ok(d.as_bytes().to_vec()),
    }
}

fn log_event(e: &Event) {
    match e {
        Event::Sending {
            method,
            url,
            headers,
        } => {
            eprintln!("> {method} {url}");
            for (k, v) in *headers {
                eprintln!("> {k}: {v}");
            }
        }
        Event::Received {
            version,
            status,
            headers,
        } => {
            eprintln!("< {version} {status}");
            for (k, v) in *headers {
                eprintln!("< {k}: {v}");
            }
        }
        Event::Solving(c) => eprintln!(
            "* HTTP {}: solving difficulty {} (salt {})",
            c.status, c.difficulty, c.salt
        ),
        Event::Solved { nonce, elapsed } => {
            eprintln!("* solved: nonce {nonce} in {:.3} s", elapsed.as_secs_f64())
        }
        Event::Waiting(d) => eprintln!("* waiting {} s (Retry-After)", d.as_secs()),
    }
}

fn error_code(e: &Error) -> u8 {
    match e {
        Error::Blocked { .. } => exit::BLOCKED,
        Error::Banned { .. } => exit::BANNED,
        Error::TooHard { .. } => exit::TOO_HARD,
        Error::Timeout { .. } => exit::SOLVE_TIMEOUT,
        Error::GaveUp { .. } | Error::BadChallenge(_) | Error::Unsolvable { .. } => exit::GAVE_UP,
        Error::Closed => exit::EMPTY_REPLY,
        Error::Connect(_) => exit::CONNECT,
        Error::TimedOut(_) => exit::TIMED_OUT,
        Error::Request(_) => exit::BAD_REQUEST,
        Error::Transport(_) => exit::TRANSPORT,
        Error::Certificate(_) => exit::CERTIFICATE,
        Error::Tls(_) => exit::TLS,
        Error::CaCert(_) => exit::CACERT,
        _ => exit::FAILED,
    }
}

fn solve_cmd(m: &ArgMatches) -> u8 {
    let (salt, difficulty) = match m.get_one::<String>("token") {
        Some(token) => match pow_shield_protocol::read_unverified(token.trim()) {
            Some(info) => (info.salt, info.difficulty),
            None => {
                eprintln!("pow-shield: not a challenge token: {token}");
                return exit::BAD_REQUEST;
            }
        },
        None => (
            m.get_one::<String>("salt").cloned().unwrap_or_default(),
            m.get_one::<u8>("difficulty").copied().unwrap_or(0),
        ),
    };
    match solve(&salt, difficulty, &solve_options(m)) {
        Ok(nonce) => {
            println!("{nonce}");
            exit::OK
        }
        Err(e) => {
            eprintln!("pow-shield: {e}");
            error_code(&e)
        }
    }
}

fn bench(m: &ArgMatches) -> u8 {
    let opts = solve_options(m);
    let threads = opts.thread_count();
    let span = m
        .get_one::<Duration>("seconds")
        .copied()
        .filter(|s| !s.is_zero())
        .unwrap_or(Duration::from_secs(2));
    let one = hash_rate(1, span);
    let all = hash_rate(threads, span);
    println!("SHA-256 proof of work, one compression per attempt (32-character salt)");
    println!("  1 thread:   {:>8.2} M hashes/s", one / 1e6);
    println!(
        "  {threads} threads: {:>8.2} M hashes/s ({:.2} M/s per thread)",
        all / 1e6,
        all / 1e6 / threads as f64
    );
    println!("expected solve time with {threads} threads (16^d hashes on average):");
    for d in 1..=10u8 {
        let secs = 16f64.powi(i32::from(d)) / all;
        println!("  difficulty {d:>2}: {}", human(secs));
    }
    exit::OK
}

fn human(secs: f64) -> String {
    if secs < 1e-3 {
        format!("{:.1} µs", secs * 1e6)
    } else if secs < 1.0 {
        format!("{:.1} ms", secs * 1e3)
    } else if secs < 120.0 {
        format!("{secs:.1} s")
    } else if secs < 7200.0 {
        format!("{:.1} min", secs / 60.0)
    } else {
        format!("{:.1} h", secs / 3600.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<ArgMatches, clap::Error> {
        cli().try_get_matches_from(std::iter::once("pow-shield").chain(args.iter().copied()))
    }

    fn get_matches(args: &[&str]) -> ArgMatches {
        let m = parse(args).unwrap();
        m.subcommand_matches("get").unwrap().clone()
    }

    #[test]
    fn get_collects_repeated_headers_and_defaults_to_get() {
        let m = get_matches(&["get", "http://h/x", "-H", "A: 1", "-H", "B:2"]);
        let r = build_request(&m).unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(
            r.headers,
            vec![("A".into(), "1".into()), ("B".into(), "2".into())]
        );
        assert_eq!(r.body, None);
    }

    #[test]
    fn data_makes_a_form_post_unless_told_otherwise() {
        let r = build_request(&get_matches(&["get", "http://h/", "-d", "a=1"])).unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.body.as_deref(), Some(&b"a=1"[..]));
        assert!(r.headers.contains(&(
            "Content-Type".into(),
            "application/x-www-form-urlencoded".into()
        )));
        let r = build_request(&get_matches(&[
            "get",
            "http://h/",
            "-X",
            "PUT",
            "-d",
            "{}",
            "-H",
            "content-type: application/json",
        ]))
        .unwrap();
        assert_eq!(r.method, "PUT");
        assert_eq!(r.headers.len(), 1);
    }

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
    fn header_without_a_colon_and_a_non_http_url_are_refused() {
        let m = get_matches(&["get", "http://h/", "-H", "nocolon"]);
        assert_eq!(build_request(&m).unwrap_err().0, exit::BAD_REQUEST);
        let m = get_matches(&["get", "ftp://h/"]);
        assert_eq!(build_request(&m).unwrap_err().0, exit::BAD_REQUEST);
    }

    #[test]
    fn solve_takes_a_token_or_salt_and_difficulty_not_both() {
        assert!(parse(&["solve", "a.b"]).is_ok());
        assert!(parse(&["solve", "--salt", "ab", "--difficulty", "3"]).is_ok());
        assert!(parse(&["solve", "--salt", "ab"]).is_err());
        assert!(parse(&["solve"]).is_err());
        assert!(parse(&["solve", "a.b", "--salt", "ab", "--difficulty", "3"]).is_err());
    }

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

    #[test]
    fn system_store_by_default_cacert_replaces_it_and_k_wins() {
        assert_eq!(
            trust(&get_matches(&["get", "https://h/"])),
            Ok(Trust::System)
        );
        let pem = std::env::temp_dir().join(format!("pow-shield-ca-{}.pem", std::process::id()));
        std::fs::write(&pem, "PEM").unwrap();
        let path = pem.to_str().unwrap();
        assert_eq!(
            trust(&get_matches(&["get", "https://h/", "--cacert", path])),
            Ok(Trust::CaPem(b"PEM".to_vec()))
        );
        assert_eq!(
            trust(&get_matches(&["get", "https://h/", "--cacert", path, "-k"])),
            Ok(Trust::Insecure)
        );
        std::fs::remove_file(&pem).unwrap();
        assert_eq!(
            trust(&get_matches(&["get", "https://h/", "--cacert", path]))
                .unwrap_err()
                .0,
            exit::CACERT
        );
        assert_eq!(
            trust(&get_matches(&["get", "https://h/", "--insecure"])),
            Ok(Trust::Insecure)
        );
    }

    #[test]
    fn timeouts_default_to_10_s_to_connect_and_no_transfer_limit() {
        let m = get_matches(&["get", "http://h/"]);
        assert_eq!(
            m.get_one::<Duration>("connect-timeout"),
            Some(&Duration::from_secs(10))
        );
        assert_eq!(m.get_one::<Duration>("max-time"), None);
        let m = get_matches(&["get", "http://h/", "--max-time", "2.5"]);
        assert_eq!(
            m.get_one::<Duration>("max-time"),
            Some(&Duration::from_millis(2500))
        );
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

    #[test]
    fn certificate_hint_suits_the_reason() {
        assert!(certificate_hint("unable to get local issuer certificate").contains("--cacert"));
        assert!(certificate_hint("IP address mismatch").contains("another host name"));
        assert!(certificate_hint("hostname mismatch").contains("another host name"));
    }

    #[test]
    fn command_line_definition_is_consistent() {
        cli().debug_assert();
    }
}

//! `pow-shield get`: a curl-like request that pays its challenges (or
//! waits out `Retry-After` with `--wait`), then writes the response.

use std::io::{self, Read, Write};
use std::time::Duration;

use clap::{value_parser, Arg, ArgAction, ArgMatches, Command};
use pow_shield_client::blocking::{Client, Event, Request, Timeouts, Trust};
use pow_shield_client::{Error, Policy};

use crate::args::{max_solve_time, seconds, solve_options, threads};
use crate::exit::{self, error_code};

pub fn command() -> Command {
    Command::new("get")
        .about("Send a request (curl-like), solving challenges and retrying")
        .after_help(exit::EXIT_CODES)
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
        .arg(max_solve_time())
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
        .arg(threads())
}

pub fn run(m: &ArgMatches) -> u8 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::get_matches;

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
    fn header_without_a_colon_and_a_non_http_url_are_refused() {
        let m = get_matches(&["get", "http://h/", "-H", "nocolon"]);
        assert_eq!(build_request(&m).unwrap_err().0, exit::BAD_REQUEST);
        let m = get_matches(&["get", "ftp://h/"]);
        assert_eq!(build_request(&m).unwrap_err().0, exit::BAD_REQUEST);
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
    fn certificate_hint_suits_the_reason() {
        assert!(certificate_hint("unable to get local issuer certificate").contains("--cacert"));
        assert!(certificate_hint("IP address mismatch").contains("another host name"));
        assert!(certificate_hint("hostname mismatch").contains("another host name"));
    }
}

//! `pow-shield get`'s command line: curl's flags for what both do, and
//! the paying client's own.

use clap::{value_parser, Arg, ArgAction, Command};

use crate::args::{max_solve_time, seconds, threads, DEFAULT_RETRIES};
use crate::exit;

fn flag(id: &'static str, short: Option<char>, long: &'static str, help: &'static str) -> Arg {
    let arg = Arg::new(id)
        .long(long)
        .action(ArgAction::SetTrue)
        .help(help);
    match short {
        Some(c) => arg.short(c),
        None => arg,
    }
}

fn value(id: &'static str, short: Option<char>, name: &'static str, help: &'static str) -> Arg {
    let arg = Arg::new(id).long(id).value_name(name).help(help);
    match short {
        Some(c) => arg.short(c),
        None => arg,
    }
}

/// What `get --help` says about paying ahead and `--next`, before the
/// exit codes.
const PAY_AHEAD: &str = "\
Paying ahead: a response's X-PoW-Next-Challenge is solved while its body is
written, and the solution goes with the next request to that server (the
next URL, a --retry, or a URL after --next): one round trip per paid
request, no 429. Solutions are kept per server (scheme, host, port) and
shared by everything one process sends; each is used once.

--next: as curl's, the URLs and options after it are a new set with
options of its own (none carried over); the sets run in order and share
the solutions paid ahead. The exit code is the last transfer's.";

pub fn command() -> Command {
    Command::new("get")
        .about("Send requests like curl, solving challenges and retrying")
        .after_help(format!("{PAY_AHEAD}\n\n{}", exit::EXIT_CODES))
        .arg(
            Arg::new("url")
                .required(true)
                .num_args(1..)
                .action(ArgAction::Append)
                .help("http:// or https:// URLs, fetched in order (https: verified against the system's CA store)"),
        )
        .arg(flag("parallel", Some('Z'), "parallel", "Fetch the URLs at once, as curl -Z (each body written whole; at most 4 in flight per server until its RateLimit Remaining shows room)"))
        .arg(
            value("parallel-max", None, "N", "With -Z, at most N transfers at once (1 to 300)")
                .value_parser(value_parser!(usize))
                .default_value("50"),
        )
        .arg(value("request", Some('X'), "METHOD", "Method [default: GET, HEAD with -I, POST with -d/--json]"))
        .arg(
            value("header", Some('H'), "NAME: VALUE", "Request header (repeatable)")
                .action(ArgAction::Append),
        )
        .arg(
            value("data", Some('d'), "DATA", "Body, as curl's -d: @file reads a file (CR and LF dropped), @- stdin; repeated: joined with &")
                .action(ArgAction::Append),
        )
        .arg(
            value("data-binary", None, "DATA", "Body as given (@file: the file's bytes unchanged)")
                .action(ArgAction::Append),
        )
        .arg(
            value("json", None, "DATA", "JSON body (@file too): Content-Type and Accept application/json, POST")
                .action(ArgAction::Append),
        )
        .arg(value("user", Some('u'), "USER:PASSWORD", "Basic authentication"))
        .arg(value("user-agent", Some('A'), "NAME", "User-Agent header"))
        .arg(value("proxy", Some('x'), "[http://]HOST[:PORT]", "HTTP proxy [default: http_proxy/https_proxy from the environment]"))
        .arg(flag("compressed", None, "compressed", "Ask for gzip or deflate and decompress the body"))
        .arg(flag("location", Some('L'), "location", "Follow redirects (at most 50; POST becomes GET after 301, 302, 303)"))
        .arg(flag("head", Some('I'), "head", "HEAD request; print the response's status line and headers"))
        .arg(
            value("output", Some('o'), "FILE", "Write the body to FILE instead of stdout (one per URL, in order)")
                .action(ArgAction::Append),
        )
        .arg(
            Arg::new("remote-name")
                .short('O')
                .long("remote-name")
                .action(ArgAction::Append)
                .num_args(0)
                .default_missing_value("")
                .help("Write the body to a file named as the URL's last path segment (one per URL)"),
        )
        .arg(value("write-out", Some('w'), "FORMAT", "After each transfer print FORMAT: %{http_code} %{time_total} %{size_download} %{url_effective} %{num_redirects} %{content_type} %{exitcode}, \\n; @file reads it"))
        .arg(flag("include", Some('i'), "include", "Include the response's status line and headers, as the server sent them, in the output"))
        .arg(flag("verbose", Some('v'), "verbose", "Show requests, responses (as sent), solves and waits on stderr"))
        .arg(flag("silent", Some('s'), "silent", "No error messages (see -S)"))
        .arg(flag("show-error", Some('S'), "show-error", "With -s, still show error messages"))
        .arg(flag("fail", Some('f'), "fail", "HTTP status >= 400: write no body and exit 22"))
        .arg(flag("fail-with-body", None, "fail-with-body", "HTTP status >= 400: write the body and exit 22"))
        .arg(flag("insecure", Some('k'), "insecure", "https: accept any certificate for any host (still encrypted, not authenticated)"))
        .arg(value("cacert", None, "FILE", "https: trust only the CA certificates in this PEM file instead of the system's store"))
        .arg(
            value("max-difficulty", None, "D", "Refuse challenges harder than D (exit 112)")
                .value_parser(value_parser!(u8)),
        )
        .arg(max_solve_time())
        .args(crate::bot::get_args())
        .arg(flag("wait", None, "wait", "Sleep Retry-After (429, 503) instead of paying, up to --max-wait"))
        .arg(flag("pace", None, "pace", "When RateLimit / X-RateLimit-Remaining say no free request is left, sleep until the reset (up to --max-wait) before the next request to that server, instead of paying"))
        .arg(flag("next", None, "next", "Start a new set of URLs and options (as curl's --next); all sets share the solutions paid ahead"))
        .arg(
            value("max-wait", None, "SECONDS", "Longest Retry-After worth sleeping with --wait, and reset worth waiting for with --pace")
                .value_parser(value_parser!(u64))
                .default_value("60"),
        )
        .arg(
            value("connect-timeout", None, "SECONDS", "Longest wait for each connection to open (exit 28)")
                .value_parser(seconds)
                .default_value("10"),
        )
        .arg(
            value("max-time", Some('m'), "SECONDS", "Longest time of each URL as a whole, as curl: every try, solve and wait, to the last byte (exit 28); a Retry-After that would outlast it is paid instead [default: no limit]")
                .value_parser(seconds),
        )
        .arg(
            value("retries", None, "N", "Challenges paid (or waited out) per request before giving up (exit 114)")
                .value_parser(value_parser!(u32))
                .default_value(DEFAULT_RETRIES),
        )
        .arg(
            value("retry", None, "N", "As curl: retry a timeout or an HTTP 408, 429, 500, 502, 503, 504 N times, sleeping Retry-After or 1, 2, 4... s")
                .value_parser(value_parser!(u32))
                .default_value("0"),
        )
        .arg(threads())
}

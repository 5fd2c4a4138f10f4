//! `pow-shield get`: a request that behaves like curl's (the same flags for
//! what both do, the same exit codes where the meaning is the same) and
//! pays its challenges (or waits out `Retry-After` with `--wait`).

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use clap::{value_parser, Arg, ArgAction, ArgMatches, Command};
use pow_shield_client::blocking::{Client, Event, Options, Refused, Reply, Request, Timeouts};
use pow_shield_client::{Error, Policy};

mod output;
mod request;
use output::{copy_body, log_event, write_head, Counted};
use request::{build_request, trust};

use crate::args::{max_solve_time, seconds, solve_options, threads, DEFAULT_RETRIES};
use crate::exit::{self, error_code};
use crate::write_out::{Transfer, WriteOut};

/// curl's default and largest `--parallel-max`.
const PARALLEL_MAX: usize = 50;
const PARALLEL_LIMIT: usize = 300;
/// curl's limit on redirects followed with `-L` (`--max-redirs`' default).
const MAX_REDIRECTS: u32 = 50;
/// curl's longest sleep between `--retry` attempts.
const MAX_RETRY_SLEEP: Duration = Duration::from_secs(600);

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

pub fn command() -> Command {
    Command::new("get")
        .about("Send requests like curl, solving challenges and retrying")
        .after_help(exit::EXIT_CODES)
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
        .arg(
            value("max-wait", None, "SECONDS", "Longest Retry-After worth sleeping with --wait")
                .value_parser(value_parser!(u64))
                .default_value("60"),
        )
        .arg(
            value("connect-timeout", None, "SECONDS", "Longest wait for each connection to open (exit 28)")
                .value_parser(seconds)
                .default_value("10"),
        )
        .arg(
            value("max-time", Some('m'), "SECONDS", "Longest transfer of each request, connecting to the last byte (exit 28) [default: no limit]")
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

/// What the flags of one run say, beside the request.
struct Run<'m> {
    m: &'m ArgMatches,
    client: Client,
    request: Request,
    write_out: Option<WriteOut>,
    /// Show error messages (`-s` hides them, `-S` brings them back).
    errors: bool,
    proxied: bool,
}

pub fn run(m: &ArgMatches) -> u8 {
    let errors = !m.get_flag("silent") || m.get_flag("show-error");
    let complain = |code: u8, msg: &str| {
        if errors {
            eprintln!("pow-shield: ({code}) {msg}");
        }
        code
    };
    let request = match build_request(m) {
        Ok(r) => r,
        Err((code, msg)) => return complain(code, &msg),
    };
    let write_out = match m.get_one::<String>("write-out").map(|f| WriteOut::parse(f)) {
        None => None,
        Some(Ok(w)) => Some(w),
        Some(Err(e)) => return complain(exit::READ, &format!("-w: {e}")),
    };
    let mut policy = Policy {
        solve: solve_options(m),
        prefer_wait: m.get_flag("wait"),
        max_wait: Duration::from_secs(m.get_one::<u64>("max-wait").copied().unwrap_or(60)),
        max_retries: m.get_one::<u32>("retries").copied().unwrap_or(0),
        ..Policy::default()
    };
    policy.solve.progress &= !m.get_flag("silent");
    let proxy = m.get_one::<String>("proxy").cloned();
    let proxied = proxy.is_some();
    let options = trust(m).map(|trust| Options {
        trust,
        timeouts: Timeouts {
            connect: m.get_one::<Duration>("connect-timeout").copied(),
            transfer: m.get_one::<Duration>("max-time").copied(),
        },
        proxy,
    });
    let client = match options
        .and_then(|o| Client::with_options(policy, o).map_err(|e| (error_code(&e), e.to_string())))
    {
        Ok(c) => c,
        Err((code, msg)) => return complain(code, &msg),
    };
    let client = match crate::bot::signer(m) {
        Ok(Some(signer)) => client.sign_with(signer),
        Ok(None) => client,
        Err((code, msg)) => return complain(code, &msg),
    };
    let run = Run {
        m,
        client,
        request,
        write_out,
        errors,
        proxied,
    };
    let urls: Vec<&String> = m.get_many::<String>("url").into_iter().flatten().collect();
    let mut outputs = outputs(m).into_iter();
    let jobs: Vec<(&String, Option<String>)> =
        urls.into_iter().map(|u| (u, outputs.next())).collect();
    if m.get_flag("parallel") {
        let most = m
            .get_one::<usize>("parallel-max")
            .copied()
            .unwrap_or(PARALLEL_MAX)
            .clamp(1, PARALLEL_LIMIT);
        return run.parallel(&jobs, most);
    }
    // As curl: the exit code is the last transfer's.
    let mut code = exit::OK;
    for (url, output) in jobs {
        code = run.transfer(url, output);
    }
    code
}

/// Where each URL's body goes: `-o FILE` and `-O` (`""`: the URL's own
/// name) in the order given, one per URL; URLs beyond them go to stdout.
fn outputs(m: &ArgMatches) -> Vec<String> {
    let mut given: Vec<(usize, String)> = Vec::new();
    if let (Some(idx), Some(vals)) = (m.indices_of("output"), m.get_many::<String>("output")) {
        given.extend(idx.zip(vals.cloned()));
    }
    if let Some(idx) = m.indices_of("remote-name") {
        given.extend(idx.map(|i| (i, String::new())));
    }
    given.sort_by_key(|(i, _)| *i);
    given.into_iter().map(|(_, o)| o).collect()
}

/// The last path segment of `url`, curl's `-O` name.
fn remote_name(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path = rest.split(['?', '#']).next().unwrap_or("");
    match path.split_once('/') {
        Some((_, path)) => path.rsplit('/').next().unwrap_or(""),
        None => "",
    }
}

impl Run<'_> {
    /// `-Z`: up to `most` transfers at once, threads sharing one client
    /// (and so its per-origin gate: the server's breaker never sees more
    /// than 4 of them over the limit). As curl, the exit code is the
    /// first failure's (in the URLs' order), else 0.
    fn parallel(&self, jobs: &[(&String, Option<String>)], most: usize) -> u8 {
        let next = AtomicUsize::new(0);
        let codes: Vec<AtomicUsize> = jobs.iter().map(|_| AtomicUsize::new(0)).collect();
        thread::scope(|s| {
            for _ in 0..most.min(jobs.len()) {
                s.spawn(|| loop {
                    let at = next.fetch_add(1, Ordering::Relaxed);
                    let Some((url, output)) = jobs.get(at) else {
                        return;
                    };
                    let code = self.transfer(url, output.clone());
                    codes[at].store(usize::from(code), Ordering::Relaxed);
                });
            }
        });
        codes
            .iter()
            .map(|c| u8::try_from(c.load(Ordering::Relaxed)).unwrap_or(exit::FAILED))
            .find(|&c| c != exit::OK)
            .unwrap_or(exit::OK)
    }

    fn complain(&self, code: u8, msg: &str) -> u8 {
        if self.errors {
            eprintln!("pow-shield: ({code}) {msg}");
        }
        code
    }

    /// One URL: send (following redirects with -L), write the head and
    /// body where they go, then `-w`.
    fn transfer(&self, url: &str, output: Option<String>) -> u8 {
        let start = Instant::now();
        let mut done = Transfer {
            url_effective: url.to_owned(),
            ..Transfer::default()
        };
        let code = self.transfer_into(url, output, &mut done);
        done.exitcode = code;
        done.time_total = start.elapsed();
        if let Some(w) = &self.write_out {
            let mut stdout = io::stdout().lock();
            let _ = stdout.write_all(w.render(&done).as_bytes());
            let _ = stdout.flush();
        }
        code
    }

    fn transfer_into(&self, url: &str, output: Option<String>, done: &mut Transfer) -> u8 {
        if !url.starts_with("http://") && !url.starts_with("https://") {
            return self.complain(
                exit::BAD_REQUEST,
                &format!("not an http:// or https:// URL: {url}"),
            );
        }
        let m = self.m;
        let mut req = Request {
            url: url.to_owned(),
            ..self.request.clone()
        };
        let head_only = m.get_flag("head");
        let include = m.get_flag("include") || head_only;
        let mut out: Option<Box<dyn Write>> = None;
        let open = |out: &mut Option<Box<dyn Write>>| -> Result<(), u8> {
            if out.is_some() {
                return Ok(());
            }
            let w: Box<dyn Write> = match output.as_deref() {
                None | Some("-") => Box::new(io::stdout().lock()),
                Some(name) => {
                    // "" is -O's: the URL's own name.
                    let name = if name.is_empty() {
                        remote_name(url)
                    } else {
                        name
                    };
                    if name.is_empty() {
                        return Err(
                            self.complain(exit::WRITE, "remote file name has no length (-O)")
                        );
                    }
                    match std::fs::File::create(name) {
                        Ok(f) => Box::new(f),
                        Err(e) => return Err(self.complain(exit::WRITE, &format!("{name}: {e}"))),
                    }
                }
            };
            *out = Some(w);
            Ok(())
        };
        loop {
            // The breaker's refusal is shown as curl shows it (its status
            // line and headers to -i, its 403 to -w, its body), then exits
            // with its own code (110) and the error on stderr.
            let (mut reply, refusal) = match self.send(&req) {
                Ok(r) => (r, None),
                Err(Refused {
                    error,
                    reply: Some(r),
                }) => (*r, Some(error)),
                Err(Refused { error, .. }) => return self.failed(&error),
            };
            done.http_code = reply.status;
            done.url_effective = req.url.clone();
            done.content_type = header(&reply, "Content-Type")
                .unwrap_or_default()
                .to_owned();
            let failing =
                reply.status >= 400 && (m.get_flag("fail") || m.get_flag("fail-with-body"));
            if failing && !m.get_flag("fail-with-body") && refusal.is_none() {
                // curl -f: nothing of an error response is written.
                return self.complain(
                    exit::HTTP_ERROR,
                    &format!("The requested URL returned error: {}", reply.status),
                );
            }
            let next = if m.get_flag("location") && refusal.is_none() {
                redirect(&reply).map(|loc| join(&req.url, loc))
            } else {
                None
            };
            if include {
                if let Err(code) = open(&mut out) {
                    return code;
                }
                if let Some(w) = out.as_mut() {
                    if let Err(e) = write_head(w, &reply) {
                        return self.complain(exit::WRITE, &format!("writing the response: {e}"));
                    }
                }
            }
            if let Some(next) = next {
                if done.num_redirects >= MAX_REDIRECTS {
                    return self.complain(
                        exit::TOO_MANY_REDIRECTS,
                        &format!("Maximum ({MAX_REDIRECTS}) redirects followed"),
                    );
                }
                done.num_redirects += 1;
                // Drain the redirect's body (small), as curl does not show it.
                let _ = io::copy(&mut reply.body.take(1 << 20), &mut io::sink());
                if matches!(reply.status, 301..=303) && req.method == "POST"
                    || reply.status == 303 && req.method != "HEAD"
                {
                    req.method = "GET".to_owned();
                    req.body = None;
                    req.headers
                        .retain(|(k, _)| !k.eq_ignore_ascii_case("content-type"));
                }
                req.url = next;
                continue;
            }
            // -I writes no body, nor -f of an error (a refusal's included).
            if head_only || failing && !m.get_flag("fail-with-body") {
                let code = refusal.as_ref().map_or(exit::OK, |e| self.failed(e));
                return self.finish(out, code);
            }
            if let Err(code) = open(&mut out) {
                return code;
            }
            let Some(w) = out.as_mut() else {
                return exit::FAILED;
            };
            let counted = Counted {
                inner: std::mem::replace(&mut reply.body, Box::new(io::empty())),
                count: 0,
            };
            let result = copy_body(counted, &reply, m.get_flag("compressed"), w);
            match result {
                Ok(n) => done.size_download = n,
                Err((e, n)) => {
                    done.size_download = n;
                    // ureq reports a --max-time running out mid-body as a read error.
                    if e.kind() == io::ErrorKind::TimedOut {
                        return self
                            .complain(exit::TIMED_OUT, &format!("reading the response: {e}"));
                    }
                    return self.complain(exit::WRITE, &format!("writing the response: {e}"));
                }
            }
            if let Some(e) = &refusal {
                return self.finish(out, self.failed(e));
            }
            if failing {
                return self.finish(
                    out,
                    self.complain(
                        exit::HTTP_ERROR,
                        &format!("The requested URL returned error: {}", reply.status),
                    ),
                );
            }
            return self.finish(out, exit::OK);
        }
    }

    fn finish(&self, out: Option<Box<dyn Write>>, code: u8) -> u8 {
        if let Some(mut w) = out {
            if let Err(e) = w.flush() {
                return self.complain(exit::WRITE, &format!("writing the response: {e}"));
            }
        }
        code
    }

    fn failed(&self, e: &Error) -> u8 {
        let code = match e {
            // Through a proxy only the proxy's name is looked up (curl's 5).
            Error::Resolve(_) if self.proxied => exit::RESOLVE_PROXY,
            _ => error_code(e),
        };
        if self.errors {
            eprintln!("pow-shield: ({code}) {e}");
            if let Error::Certificate(why) = e {
                eprintln!("pow-shield: {}", certificate_hint(why));
            }
        }
        code
    }

    /// `Client::send` with `-v`'s log, retried as curl's `--retry` says.
    fn send(&self, req: &Request) -> Result<Reply, Refused> {
        let verbose = self.m.get_flag("verbose");
        let mut log = |e: Event| {
            if verbose {
                log_event(&e);
            }
        };
        let mut left = self.m.get_one::<u32>("retry").copied().unwrap_or(0);
        let mut backoff = Duration::from_secs(1);
        loop {
            let result = self.client.send_or_refused(req, &mut log);
            let transient = match &result {
                Err(Refused {
                    error: Error::TimedOut(_),
                    ..
                }) => true,
                Ok(r) => matches!(r.status, 408 | 429 | 500 | 502 | 503 | 504),
                Err(_) => false,
            };
            if !transient || left == 0 {
                return result;
            }
            let sleep = result
                .as_ref()
                .ok()
                .and_then(|r| header(r, "Retry-After"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs)
                .unwrap_or(backoff)
                .min(MAX_RETRY_SLEEP);
            if self.errors {
                eprintln!(
                    "pow-shield: transient problem, retrying in {} s ({left} retries left)",
                    sleep.as_secs()
                );
            }
            drop(result);
            thread::sleep(sleep);
            backoff = (backoff * 2).min(MAX_RETRY_SLEEP);
            left -= 1;
        }
    }
}

fn header<'r>(reply: &'r Reply, name: &str) -> Option<&'r str> {
    reply
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// The `Location` of a redirect (301, 302, 303, 307, 308).
fn redirect(reply: &Reply) -> Option<&str> {
    matches!(reply.status, 301 | 302 | 303 | 307 | 308)
        .then(|| header(reply, "Location"))
        .flatten()
        .filter(|l| !l.is_empty())
}

/// `location` resolved against `base` (RFC 3986 §5.2, the forms servers send).
fn join(base: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_owned();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    if let Some(rest) = location.strip_prefix("//") {
        return format!("{scheme}://{rest}");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    if location.starts_with('/') {
        return format!("{scheme}://{authority}{location}");
    }
    let path = &rest[authority.len()..];
    let path = path.split(['?', '#']).next().unwrap_or("");
    if location.starts_with('?') {
        return format!("{scheme}://{authority}{path}{location}");
    }
    let dir = match path.rfind('/') {
        Some(at) => &path[..=at],
        None => "/",
    };
    format!("{scheme}://{authority}{dir}{location}")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::get_matches;

    #[test]
    fn locations_are_resolved_against_the_url() {
        let base = "http://h:8/a/b/c?q=1";
        assert_eq!(join(base, "https://x/y"), "https://x/y");
        assert_eq!(join(base, "//x/y"), "http://x/y");
        assert_eq!(join(base, "/y"), "http://h:8/y");
        assert_eq!(join(base, "d"), "http://h:8/a/b/d");
        assert_eq!(join(base, "?r=2"), "http://h:8/a/b/c?r=2");
        assert_eq!(join("http://h", "d"), "http://h/d");
    }

    #[test]
    fn remote_name_is_the_last_path_segment() {
        assert_eq!(remote_name("http://h/a/data.json?x=1"), "data.json");
        assert_eq!(remote_name("http://h/a/"), "");
        assert_eq!(remote_name("http://h"), "");
    }

    #[test]
    fn outputs_pair_with_urls_in_order() {
        let m = get_matches(&[
            "get",
            "http://h/a",
            "-O",
            "http://h/b",
            "-o",
            "x",
            "http://h/c",
        ]);
        assert_eq!(outputs(&m), vec![String::new(), "x".to_owned()]);
    }

    #[test]
    fn timeouts_default_to_10_s_to_connect_and_no_transfer_limit() {
        let m = get_matches(&["get", "http://h/"]);
        assert_eq!(
            m.get_one::<Duration>("connect-timeout"),
            Some(&Duration::from_secs(10))
        );
        assert_eq!(m.get_one::<Duration>("max-time"), None);
        let m = get_matches(&["get", "http://h/", "-m", "2.5"]);
        assert_eq!(
            m.get_one::<Duration>("max-time"),
            Some(&Duration::from_millis(2500))
        );
    }

    #[test]
    fn certificate_hint_suits_the_reason() {
        assert!(certificate_hint("unable to get local issuer certificate").contains("--cacert"));
        assert!(certificate_hint("IP address mismatch").contains("another host name"));
    }
}

//! `pow-shield get`: a request that behaves like curl's (the same flags for
//! what both do, the same exit codes where the meaning is the same) and
//! pays its challenges (or waits out `Retry-After` with `--wait`).

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::ArgMatches;
use pow_shield_client::ahead::Ahead;
use pow_shield_client::blocking::{Client, Event, Options, Refused, Reply, Request, Timeouts};
use pow_shield_client::{Error, Policy};

mod command;
mod output;
mod request;
mod urls;
pub use command::command;
use output::{copy_body, log_event, write_head, Counted};
use request::{build_request, trust};
use urls::{certificate_hint, join, outputs, redirect, remote_name};

use crate::args::solve_options;
use crate::exit::{self, error_code};
use crate::write_out::{Transfer, WriteOut};

/// curl's default and largest `--parallel-max`.
const PARALLEL_MAX: usize = 50;
const PARALLEL_LIMIT: usize = 300;
/// curl's limit on redirects followed with `-L` (`--max-redirs`' default).
const MAX_REDIRECTS: u32 = 50;
/// curl's longest sleep between `--retry` attempts.
const MAX_RETRY_SLEEP: Duration = Duration::from_secs(600);

/// What the flags of one run say, beside the request.
struct Run<'m> {
    m: &'m ArgMatches,
    client: Client,
    request: Request,
    write_out: Option<WriteOut>,
    /// `-m`: each URL's time as a whole, its redirects included (each
    /// `--retry` attempt has its own).
    max_time: Option<Duration>,
    /// Show error messages (`-s` hides them, `-S` brings them back).
    errors: bool,
    proxied: bool,
}

/// Runs the sets of one command line (`--next` separates them) in order,
/// sharing one store of solutions paid ahead; the exit code is the last
/// transfer's, as curl's.
pub fn run_sets(sets: &[ArgMatches]) -> u8 {
    let ahead = Arc::new(Ahead::new());
    let mut code = exit::OK;
    for m in sets {
        code = run(m, &ahead);
    }
    code
}

/// One set of URLs with its options.
pub fn run(m: &ArgMatches, ahead: &Arc<Ahead>) -> u8 {
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
        pace: m.get_flag("pace"),
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
    let client = client.with_ahead(Arc::clone(ahead));
    let run = Run {
        m,
        client,
        request,
        write_out,
        max_time: m.get_one::<Duration>("max-time").copied(),
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
        let mut deadline = self.max_time.map(|limit| Instant::now() + limit);
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
            let (mut reply, refusal) = match self.send(&req, &mut deadline) {
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

    /// `Client::send` with `-v`'s log, by `deadline` (`-m`), retried as
    /// curl's `--retry` says (each attempt with a deadline of its own).
    fn send(&self, req: &Request, deadline: &mut Option<Instant>) -> Result<Reply, Refused> {
        let verbose = self.m.get_flag("verbose");
        let mut log = |e: Event| {
            if verbose {
                log_event(&e);
            }
        };
        let mut left = self.m.get_one::<u32>("retry").copied().unwrap_or(0);
        let mut backoff = Duration::from_secs(1);
        loop {
            let result = self.client.send_or_refused_until(req, &mut log, *deadline);
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
            *deadline = self.max_time.map(|limit| Instant::now() + limit);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::get_matches;

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
}

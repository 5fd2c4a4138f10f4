//! `pay_loop [--at-once] [--blocking] [--pace] [--no-pay-ahead] [--time] URL COUNT [NAME: VALUE]...`:
//! sends COUNT GETs through the reqwest middleware ([`PowShield`] with the
//! default policy), each with the given headers, one after the other (or,
//! with `--at-once`, all at the same time through one client, as a
//! caller's `join_all`), and prints one line per request: `<n> <status>`
//! or `<n> error: <why>` (a `pow_shield_client::Error` in its Debug form,
//! e.g. `Blocked { status: 403 }`). Exits 0 when every request ended 200,
//! 1 otherwise (after trying all COUNT), 2 on bad usage.
//!
//! `--blocking` sends them through the library's `blocking::Client`
//! instead (on a blocking thread), `--pace` sets `Policy::pace`,
//! `--no-pay-ahead` clears `Policy::pay_ahead` (every paid request meets
//! its 429 first, t/pow_shield_pay_loop.t), and
//! `--time` adds each request's milliseconds to its line (`<n> <status>
//! <ms>`, for bench/pay_ahead_rust.sh). Both clients pay ahead by default.
//!
//! t/pow_shield_pay_loop.t runs it against the module: a client that pays
//! every challenge must never be blocked; t/pow_shield_client_gate.t runs
//! it `--at-once`: 10 or 50 requests over the limit all end 200;
//! t/pow_shield_cli_pay_ahead.t counts its round trips when it pays ahead.

use std::process::ExitCode;
use std::time::Instant;

use pow_shield_client::blocking::{Client, Request};
use pow_shield_client::middleware::PowShield;
use pow_shield_client::Policy;
use reqwest_middleware::ClientWithMiddleware;

/// One request's outcome line (without its number), and whether it was a 200.
async fn one(
    client: &ClientWithMiddleware,
    url: &str,
    headers: &[(String, String)],
) -> (String, bool) {
    let mut req = client.get(url);
    for (name, value) in headers {
        req = req.header(name.as_str(), value.as_str());
    }
    match req.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            (status.to_string(), status == 200)
        }
        Err(e) => {
            let why = match &e {
                reqwest_middleware::Error::Middleware(inner) => inner
                    .downcast_ref::<pow_shield_client::Error>()
                    .map_or_else(|| inner.to_string(), |pe| format!("{pe:?}")),
                other => other.to_string(),
            };
            (format!("error: {why}"), false)
        }
    }
}

/// One request through the blocking client: its outcome line and whether
/// it was a 200.
fn one_blocking(client: &Client, url: &str, headers: &[(String, String)]) -> (String, bool) {
    let req = Request {
        method: "GET".into(),
        url: url.into(),
        headers: headers.to_vec(),
        body: None,
    };
    match client.send(&req, &mut |_| {}) {
        Ok(mut reply) => {
            let _ = std::io::copy(&mut reply.body, &mut std::io::sink());
            (reply.status.to_string(), reply.status == 200)
        }
        Err(e) => (format!("error: {e:?}"), false),
    }
}

/// The options before the URL.
#[derive(Default)]
struct Flags {
    at_once: bool,
    blocking: bool,
    pace: bool,
    no_pay_ahead: bool,
    time: bool,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut flags = Flags::default();
    while let Some(flag) = args.first() {
        let set = match flag.as_str() {
            "--at-once" => &mut flags.at_once,
            "--blocking" => &mut flags.blocking,
            "--pace" => &mut flags.pace,
            "--no-pay-ahead" => &mut flags.no_pay_ahead,
            "--time" => &mut flags.time,
            _ => break,
        };
        *set = true;
        args.remove(0);
    }
    let (Some(url), Some(count)) = (
        args.first().cloned(),
        args.get(1).and_then(|n| n.parse::<u32>().ok()),
    ) else {
        eprintln!(
            "usage: pay_loop [--at-once] [--blocking] [--pace] [--no-pay-ahead] [--time] URL COUNT [NAME: VALUE]..."
        );
        return ExitCode::from(2);
    };
    let mut headers = Vec::new();
    for h in &args[2..] {
        let Some((name, value)) = h.split_once(':') else {
            eprintln!("pay_loop: header {h:?} is not \"Name: value\"");
            return ExitCode::from(2);
        };
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    let policy = Policy {
        pace: flags.pace,
        pay_ahead: !flags.no_pay_ahead,
        ..Policy::default()
    };
    let outcomes = if flags.blocking {
        let client = Client::new(policy);
        let run = move || {
            (1..=count)
                .map(|n| {
                    let start = Instant::now();
                    let (line, ok) = one_blocking(&client, &url, &headers);
                    (n, (line, ok), start.elapsed())
                })
                .collect::<Vec<_>>()
        };
        match tokio::task::spawn_blocking(run).await {
            Ok(outcomes) => outcomes,
            Err(e) => vec![(0, (format!("error: task: {e}"), false), Default::default())],
        }
    } else {
        let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with(PowShield::new(policy))
            .build();
        if flags.at_once {
            let mut tasks = tokio::task::JoinSet::new();
            for n in 1..=count {
                let (client, url, headers) = (client.clone(), url.clone(), headers.clone());
                tasks.spawn(async move {
                    let start = Instant::now();
                    (n, one(&client, &url, &headers).await, start.elapsed())
                });
            }
            let mut outcomes = Vec::new();
            while let Some(done) = tasks.join_next().await {
                match done {
                    Ok(outcome) => outcomes.push(outcome),
                    Err(e) => {
                        outcomes.push((0, (format!("error: task: {e}"), false), Default::default()))
                    }
                }
            }
            outcomes.sort_by_key(|(n, _, _)| *n);
            outcomes
        } else {
            let mut outcomes = Vec::new();
            for n in 1..=count {
                let start = Instant::now();
                outcomes.push((n, one(&client, &url, &headers).await, start.elapsed()));
            }
            outcomes
        }
    };
    let mut all_ok = true;
    for (n, (line, ok), took) in outcomes {
        if flags.time {
            println!("{n} {line} {:.3}", took.as_secs_f64() * 1e3);
        } else {
            println!("{n} {line}");
        }
        all_ok &= ok;
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

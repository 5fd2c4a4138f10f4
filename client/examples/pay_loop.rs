//! `pay_loop [--at-once] URL COUNT [NAME: VALUE]...`: sends COUNT GETs
//! through the reqwest middleware ([`PowShield`] with the default policy),
//! each with the given headers, one after the other (or, with `--at-once`,
//! all at the same time through one client, as a caller's `join_all`), and
//! prints one line per request: `<n> <status>` or `<n> error: <why>` (a
//! `pow_shield_client::Error` in its Debug form, e.g. `Blocked { status:
//! 403 }`). Exits 0 when every request ended 200, 1 otherwise (after trying
//! all COUNT), 2 on bad usage.
//!
//! t/pow_shield_pay_loop.t runs it against the module: a client that pays
//! every challenge must never be blocked; t/pow_shield_client_gate.t runs
//! it `--at-once`: 10 or 50 requests over the limit all end 200.

use std::process::ExitCode;

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

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let at_once = args.first().is_some_and(|a| a == "--at-once");
    if at_once {
        args.remove(0);
    }
    let (Some(url), Some(count)) = (
        args.first().cloned(),
        args.get(1).and_then(|n| n.parse::<u32>().ok()),
    ) else {
        eprintln!("usage: pay_loop [--at-once] URL COUNT [NAME: VALUE]...");
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
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(PowShield::new(Policy::default()))
        .build();
    let outcomes = if at_once {
        let mut tasks = tokio::task::JoinSet::new();
        for n in 1..=count {
            let (client, url, headers) = (client.clone(), url.clone(), headers.clone());
            tasks.spawn(async move { (n, one(&client, &url, &headers).await) });
        }
        let mut outcomes = Vec::new();
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok(outcome) => outcomes.push(outcome),
                Err(e) => outcomes.push((0, (format!("error: task: {e}"), false))),
            }
        }
        outcomes.sort_by_key(|(n, _)| *n);
        outcomes
    } else {
        let mut outcomes = Vec::new();
        for n in 1..=count {
            outcomes.push((n, one(&client, &url, &headers).await));
        }
        outcomes
    };
    let mut all_ok = true;
    for (n, (line, ok)) in outcomes {
        println!("{n} {line}");
        all_ok &= ok;
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

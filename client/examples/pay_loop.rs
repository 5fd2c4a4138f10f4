//! `pay_loop URL COUNT [NAME: VALUE]...`: sends COUNT GETs one after the
//! other through the reqwest middleware ([`PowShield`] with the default
//! policy), each with the given headers, and prints one line per request:
//! `<n> <status>` or `<n> error: <why>` (a `pow_shield_client::Error` in its
//! Debug form, e.g. `Blocked { status: 403 }`). Exits 0 when every request
//! ended 200, 1 otherwise (after trying all COUNT), 2 on bad usage.
//!
//! t/pow_shield_pay_loop.t runs it against the module: a client that pays
//! every challenge must never be blocked.

use std::process::ExitCode;

use pow_shield_client::middleware::PowShield;
use pow_shield_client::Policy;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(url), Some(count)) = (
        args.first(),
        args.get(1).and_then(|n| n.parse::<u32>().ok()),
    ) else {
        eprintln!("usage: pay_loop URL COUNT [NAME: VALUE]...");
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
    let mut all_ok = true;
    for n in 1..=count {
        let mut req = client.get(url.as_str());
        for (name, value) in &headers {
            req = req.header(name.as_str(), value.as_str());
        }
        match req.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                println!("{n} {status}");
                all_ok &= status == 200;
            }
            Err(e) => {
                let why = match &e {
                    reqwest_middleware::Error::Middleware(inner) => inner
                        .downcast_ref::<pow_shield_client::Error>()
                        .map_or_else(|| inner.to_string(), |pe| format!("{pe:?}")),
                    other => other.to_string(),
                };
                println!("{n} error: {why}");
                all_ok = false;
            }
        }
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

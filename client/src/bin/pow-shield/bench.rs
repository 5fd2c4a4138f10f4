//! `pow-shield bench`: this machine's hash rate, on one thread and on all,
//! beside OpenSSL's SHA-256 on the same machine, and the solve times it
//! makes.

use std::process::Command as Process;
use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches, Command};
use pow_shield_client::{engine_name, measure, Rate};

use crate::args::{seconds, solve_options, threads};
use crate::exit;

pub fn command() -> Command {
    Command::new("bench")
        .about("Hashes per second on this machine beside OpenSSL's SHA-256, and the expected solve times")
        .arg(threads())
        .arg(
            Arg::new("seconds")
                .long("seconds")
                .value_name("S")
                .value_parser(seconds)
                .default_value("2")
                .help("Measuring time for each run"),
        )
        .arg(
            Arg::new("no-openssl")
                .long("no-openssl")
                .action(ArgAction::SetTrue)
                .help("Do not run `openssl speed` for comparison"),
        )
}

pub fn run(m: &ArgMatches) -> u8 {
    let opts = solve_options(m);
    let threads = opts.thread_count();
    let span = m
        .get_one::<Duration>("seconds")
        .copied()
        .filter(|s| !s.is_zero())
        .unwrap_or(Duration::from_secs(2));
    let one = measure(1, span);
    let all = measure(threads, span);
    let openssl = if m.get_flag("no-openssl") {
        Err("not run (--no-openssl)".to_owned())
    } else {
        openssl_compressions(span)
    };
    print!("{}", report(&engine_name(), &one, threads, &all, &openssl));
    exit::OK
}

/// One thread's rate per core: per CPU second where the platform tells it
/// (as `openssl speed` counts), else per wall-clock second.
fn per_core(rate: &Rate) -> f64 {
    rate.per_cpu_second().unwrap_or_else(|| rate.per_second())
}

fn report(
    engine: &str,
    one: &Rate,
    threads: usize,
    all: &Rate,
    openssl: &Result<f64, String>,
) -> String {
    let mut out = String::new();
    let one_core = per_core(one);
    let all_rate = all.per_second();
    out += &format!(
        "SHA-256 proof of work, one compression per attempt (32-character salt), engine {engine}\n"
    );
    out += &format!(
        "  1 thread:   {:>8.2} M hashes/s per core (CPU time; {:.2} M/s wall clock)\n",
        one_core / 1e6,
        one.per_second() / 1e6
    );
    out += &format!(
        "  {threads} threads: {:>8.2} M hashes/s ({:.2} M/s per thread)\n",
        all_rate / 1e6,
        all_rate / 1e6 / threads as f64
    );
    match openssl {
        Ok(openssl) => {
            out += &format!(
                "  OpenSSL:    {:>8.2} M compressions/s per core (openssl speed -bytes 16384 sha256, ÷ 64)\n",
                openssl / 1e6
            );
            out += &format!(
                "  1 thread ÷ OpenSSL: {:.2}\n",
                one_core / openssl.max(1e-9)
            );
        }
        Err(why) => out += &format!("  OpenSSL: {why}\n"),
    }
    out += &format!("expected solve time with {threads} threads (2^bits hashes on average):\n");
    for bits in [8u8, 12, 16, 18, 20, 22, 24, 28, 32, 40] {
        let secs = 2f64.powi(i32::from(bits)) / all_rate.max(1e-9);
        let hex = if bits % 4 == 0 {
            format!(" (difficulty {})", bits / 4)
        } else {
            String::new()
        };
        out += &format!("  {bits:>2} bits{hex:<15}: {}\n", human(secs));
    }
    out
}

/// SHA-256 compressions per CPU second by `openssl speed` on 16 KiB
/// buffers: its throughput in bytes ÷ 64.
fn openssl_compressions(span: Duration) -> Result<f64, String> {
    let secs = span.as_secs().max(1).to_string();
    let output = Process::new("openssl")
        .args(["speed", "-seconds", &secs, "-bytes", "16384", "sha256"])
        .output()
        .map_err(|e| format!("not measured: `openssl` could not be run ({e})"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    parse_openssl_speed(&text)
        .map(|bytes_per_s| bytes_per_s / 64.0)
        .ok_or_else(|| "not measured: `openssl speed` printed no sha256 figure".to_owned())
}

/// The bytes per second of the `sha256` row of `openssl speed` output
/// (`sha256  1157302.20k`, in thousands of bytes).
fn parse_openssl_speed(text: &str) -> Option<f64> {
    let row = text.lines().rev().find(|l| l.starts_with("sha256 "))?;
    let figure = row.split_whitespace().last()?;
    let thousands: f64 = figure.strip_suffix('k')?.parse().ok()?;
    Some(thousands * 1000.0)
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

    #[test]
    fn openssl_speed_output_gives_bytes_per_second() {
        let text =
            "version: 3.0.2\nbuilt on: x\ntype          16384 bytes\nsha256         1157302.20k\n";
        assert_eq!(parse_openssl_speed(text), Some(1_157_302_200.0));
        assert_eq!(parse_openssl_speed("nothing here"), None);
    }

    #[test]
    fn the_report_shows_both_rates_and_their_ratio() {
        let rate = |hashes, cpu| Rate {
            hashes,
            elapsed: Duration::from_secs(1),
            cpu,
        };
        let text = report(
            "sha-ni (2 lanes)",
            &rate(30_000_000, Some(Duration::from_secs(1))),
            2,
            &rate(58_000_000, None),
            &Ok(20_000_000.0),
        );
        assert!(text.contains("engine sha-ni (2 lanes)"), "{text}");
        assert!(text.contains("30.00 M hashes/s per core"), "{text}");
        assert!(text.contains("OpenSSL:       20.00 M"), "{text}");
        assert!(text.contains("1 thread ÷ OpenSSL: 1.50"), "{text}");
        let without = report(
            "portable",
            &rate(1, None),
            1,
            &rate(1, None),
            &Err("not measured: x".into()),
        );
        assert!(without.contains("OpenSSL: not measured: x"), "{without}");
    }
}

//! `pow-shield bench`: this machine's hash rate, on one thread and on all,
//! and the solve times it makes.

use std::time::Duration;

use clap::{Arg, ArgMatches, Command};
use pow_shield_client::hash_rate;

use crate::args::{seconds, solve_options, threads};
use crate::exit;

pub fn command() -> Command {
    Command::new("bench")
        .about("Hashes per second on this machine and the expected solve times")
        .arg(threads())
        .arg(
            Arg::new("seconds")
                .long("seconds")
                .value_name("S")
                .value_parser(seconds)
                .default_value("2")
                .help("Measuring time for each of the two runs"),
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

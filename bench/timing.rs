//! The timing every micro-bench of bench/ shares (pow_cost.rs,
//! bot_verify.rs): rounds of a fixed batch of calls, each round timed as a
//! whole after a warm-up, reported as the median with min and max (the
//! noise).

use std::time::Instant;

/// The rounds `var` asks for (a positive number), else 7.
pub fn rounds(var: &str) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(7)
}

/// Runs `f` `iters` times per round, `rounds` rounds; returns ns per call of
/// each round.
pub fn measure(iters: u64, rounds: usize, mut f: impl FnMut(u64)) -> Vec<f64> {
    // Warm-up: caches, branch predictors, CPU frequency.
    for i in 0..iters / 10 + 1 {
        f(i);
    }
    (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for i in 0..iters {
                f(i);
            }
            start.elapsed().as_nanos() as f64 / iters as f64
        })
        .collect()
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

pub fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

pub fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

/// Prints one row, in µs (`scale` 1e3) or ns (`scale` 1).
pub fn row(name: &str, unit: &str, scale: f64, iters: u64, ns: &[f64]) {
    println!(
        "{name:<48} {:>10.3} {unit:<3} (min {:.3}, max {:.3}; {iters} calls x {} rounds)",
        median(ns) / scale,
        min(ns) / scale,
        max(ns) / scale,
        ns.len()
    );
}

//! Cost of issuing and of verifying one challenge, of the local window, and
//! of solving (the client's side).
//!
//!     cargo bench --features vendored --bench pow_cost
//!
//! The protocol and the limiter come from their crates
//! (`pow-shield-protocol`, `pow-shield-core`): no nginx. Every figure is the median of
//! `POW_COST_ROUNDS` rounds (default 7), each a fixed batch of calls timed
//! as a whole; min and max of the rounds are shown to judge the noise.

use std::hint::black_box;
use std::time::Instant;

#[path = "timing.rs"]
mod timing;
use timing::{measure, median, rounds, row};

use pow_shield_core::limiter::window::{self, SlidingWindow};
use pow_shield_core::limiter::RateLimit;
use pow_shield_protocol as pow;

const IP: &str = "203.0.113.19";
const TTL_MS: u64 = 60_000;
/// A fixed "now" so verification never sees an expired token.
const NOW_MS: u64 = 1_711_929_570_000;
/// Challenges solved ahead of the verify loops; each costs ~16^4 hashes.
const BATCH: usize = 64;

/// A deterministic salt per index, as `issue_challenge` would produce.
fn salt(i: usize) -> [u8; pow::SALT_LEN] {
    let mut s = [0u8; pow::SALT_LEN];
    for (j, b) in s.iter_mut().enumerate() {
        *b = (i as u8)
            .wrapping_mul(31)
            .wrapping_add(j as u8)
            .wrapping_mul(0x9d)
            ^ (i >> 8) as u8;
    }
    s
}

/// A nonce that does NOT solve `salt` at `difficulty` (the 422 path).
fn wrong_nonce(salt: &str, difficulty: u8, right: u64) -> String {
    (right + 1..)
        .map(|n| n.to_string())
        .find(|n| !pow::meets_difficulty(salt.as_bytes(), n.as_bytes(), difficulty))
        .unwrap_or_default()
}

/// The same token with the first character of its MAC changed: a
/// well-formed tag that does not match (the HMAC is computed, then refused).
fn bad_signature(token: &str) -> String {
    let dot = token.find('.').unwrap_or(0);
    let mut bytes = token.as_bytes().to_vec();
    let c = &mut bytes[dot + 1];
    *c = if *c == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).unwrap_or_default()
}

fn main() {
    let rounds = rounds("POW_COST_ROUNDS");
    let keys = pow::SecretKeys::single(pow::Secret::new(&[7u8; 32]).expect("32-byte key"));
    println!("pow-shield pow_cost: median of {rounds} rounds (POW_COST_ROUNDS)");
    println!();

    // ---- issuing: what every 429 costs the server -------------------------
    let iters = 20_000;
    let ns = measure(iters, rounds, |i| {
        let c = pow::issue_challenge_bits(
            black_box(&keys),
            black_box(IP),
            black_box(NOW_MS + i),
            TTL_MS,
            16,
        )
        .expect("OS RNG");
        black_box(c);
    });
    row("issue_challenge (OS random salt)", "us", 1e3, iters, &ns);
    let issue_us = median(&ns) / 1e3;

    let ns = measure(iters, rounds, |i| {
        let c = pow::issue_challenge_bits_with_salt(
            black_box(&keys),
            black_box(IP),
            black_box(NOW_MS + i),
            TTL_MS,
            16,
            black_box(salt(i as usize)),
        );
        black_box(c);
    });
    row("issue_challenge_with_salt (no RNG)", "us", 1e3, iters, &ns);

    // What a response that carries the next challenge costs (pay-ahead,
    // docs/directives.md pow_shield_pay_ahead): the token as the module
    // signs it, bound to a price policy and a client key, with a
    // generation, and the two numbers of its headers.
    let binding = pow::Binding {
        policy: 0x5eed_0000_0000_0001,
        client: pow::client_id(IP.as_bytes()),
        work: pow::Work::Sha256,
    };
    let ns = measure(iters, rounds, |i| {
        let c = pow::issue_bound_challenge(
            black_box(&keys),
            black_box(IP),
            black_box(NOW_MS + i),
            TTL_MS,
            16,
            Some(7),
            black_box(binding),
            pow::Strike::None,
        )
        .expect("OS RNG");
        black_box((c.bits.to_string(), c.difficulty.to_string(), c));
    });
    row(
        "next challenge sent ahead (bound, OS random salt)",
        "us",
        1e3,
        iters,
        &ns,
    );
    let ahead_us = median(&ns) / 1e3;

    // ---- verifying: solve a batch first, outside the timed loops ----------
    let solve_start = Instant::now();
    let solved: Vec<(String, String, String, String)> = (0..BATCH)
        .map(|i| {
            let c = pow::issue_challenge_with_salt(&keys, IP, NOW_MS, TTL_MS, 4, salt(i));
            let nonce = pow::solve(&c.salt, c.difficulty);
            let wrong = wrong_nonce(&c.salt, c.difficulty, nonce);
            let forged = bad_signature(&c.token);
            (c.token, nonce.to_string(), wrong, forged)
        })
        .collect();
    let presolve = solve_start.elapsed();
    // Every prepared case must give the answer it is meant to measure.
    for (token, nonce, wrong, forged) in &solved {
        let verify = |t: &str, n: &str| {
            pow::verify_solution(
                &keys,
                Some(t.as_bytes()),
                Some(n.as_bytes()),
                IP,
                16,
                NOW_MS,
                TTL_MS,
            )
        };
        assert!(verify(token, nonce).is_ok(), "valid solution refused");
        assert_eq!(verify(token, wrong), Err(pow::Rejection::WrongSolution));
        assert_eq!(verify(forged, nonce), Err(pow::Rejection::BadSignature));
    }

    let iters = 20_000;
    let pick = |i: u64| &solved[i as usize % BATCH];
    let ns = measure(iters, rounds, |i| {
        let (token, nonce, _, _) = pick(i);
        let r = pow::verify_solution(
            black_box(&keys),
            Some(black_box(token.as_bytes())),
            Some(black_box(nonce.as_bytes())),
            black_box(IP),
            16,
            black_box(NOW_MS),
            TTL_MS,
        );
        black_box(r.is_ok());
    });
    row(
        "verify_solution, valid (difficulty 4)",
        "us",
        1e3,
        iters,
        &ns,
    );
    let verify_us = median(&ns) / 1e3;

    let ns = measure(iters, rounds, |i| {
        let (token, _, wrong, _) = pick(i);
        let r = pow::verify_solution(
            black_box(&keys),
            Some(black_box(token.as_bytes())),
            Some(black_box(wrong.as_bytes())),
            black_box(IP),
            16,
            black_box(NOW_MS),
            TTL_MS,
        );
        black_box(r.is_err());
    });
    row("verify_solution, wrong nonce (422)", "us", 1e3, iters, &ns);

    let ns = measure(iters, rounds, |i| {
        let (_, nonce, _, forged) = pick(i);
        let r = pow::verify_solution(
            black_box(&keys),
            Some(black_box(forged.as_bytes())),
            Some(black_box(nonce.as_bytes())),
            black_box(IP),
            16,
            black_box(NOW_MS),
            TTL_MS,
        );
        black_box(r.is_err());
    });
    row(
        "verify_solution, bad signature (403)",
        "us",
        1e3,
        iters,
        &ns,
    );

    // ---- the local-mode sliding window (the maths only, no shm lock) ------
    let iters = 10_000_000;
    let green = RateLimit {
        requests: 1_000_000,
        window_ms: 1_000,
    };
    let mut state = SlidingWindow::default();
    let ns = measure(iters, rounds, |i| {
        // One ms every 16 calls: ~16 k requests/s per client, never full.
        let v = window::admit(black_box(&mut state), black_box(green), NOW_MS + i / 16);
        black_box(v);
    });
    row("limiter::window::admit, admitted", "ns", 1.0, iters, &ns);
    let admit_ns = median(&ns);

    let full = RateLimit {
        requests: 60,
        window_ms: 60_000,
    };
    let mut state = SlidingWindow::default();
    for _ in 0..60 {
        window::admit(&mut state, full, NOW_MS);
    }
    let ns = measure(iters, rounds, |_| {
        let v = window::admit(black_box(&mut state), black_box(full), black_box(NOW_MS));
        black_box(v);
    });
    row(
        "limiter::window::admit, refused (full)",
        "ns",
        1.0,
        iters,
        &ns,
    );

    // ---- solving: the client's cost ---------------------------------------
    println!();
    println!(
        "solve (client side, 1 thread, pow::solve with midstate reuse; {BATCH} challenges pre-solved at d=4 in {:.2} s)",
        presolve.as_secs_f64()
    );
    for (difficulty, salts) in [(4u8, 64usize), (5, 16)] {
        let mut times = Vec::with_capacity(salts);
        let mut hashes: u64 = 0;
        for i in 0..salts {
            let s = hex::encode(salt(1_000 + i));
            let start = Instant::now();
            let nonce = pow::solve(black_box(&s), black_box(difficulty));
            times.push(start.elapsed().as_secs_f64());
            hashes += black_box(nonce) + 1;
        }
        let total: f64 = times.iter().sum();
        let mean_ms = total / salts as f64 * 1e3;
        let expected = 16f64.powi(i32::from(difficulty));
        println!(
            "pow::solve difficulty {difficulty}: mean {mean_ms:>8.2} ms over {salts} salts \
             (min {:.2}, max {:.2} ms); mean {:.0} hashes (expected 16^{difficulty} = {expected:.0}); \
             {:.2} M hashes/s; at that rate the expected solve is {:.2} ms",
            times.iter().copied().fold(f64::INFINITY, f64::min) * 1e3,
            times.iter().copied().fold(0.0, f64::max) * 1e3,
            hashes as f64 / salts as f64,
            hashes as f64 / total / 1e6,
            expected / (hashes as f64 / total) * 1e3,
        );
    }

    println!();
    println!(
        "summary: issue {issue_us:.2} us, verify {verify_us:.2} us, admit {admit_ns:.1} ns \
         (one core; issue+verify per solved request {:.2} us; a next challenge sent ahead \
         {ahead_us:.2} us, budget 2 us)",
        issue_us + verify_us
    );
}

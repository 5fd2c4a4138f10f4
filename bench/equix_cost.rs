//! What `pow_shield_work equix` costs (docs/equix.md): verifying one
//! solution as the module does (MAC, fields, binding, expiry, the hash's
//! bits, then Equi-X with HashX interpreted), beside HashX compiled; and
//! the client's side: Equi-X solves a second per core, compiled and
//! interpreted, and the solver's memory.
//!
//!     cargo bench --features vendored,equix --bench equix_cost
//!
//! Times are per call, the median of `EQUIX_COST_ROUNDS` rounds (default
//! 7), in wall time and in this thread's CPU time: on a shared machine the
//! CPU time is what one core spends, however busy the others keep it.

use std::hint::black_box;
use std::time::{Duration, Instant};

use equix::{EquiXBuilder, RuntimeOption, Solution};
use pow_shield_protocol as pow;

// (Its row printer and min/max are pow_cost's: unused here.)
#[allow(dead_code)]
#[path = "timing.rs"]
mod timing;
use timing::{median, rounds};

const IP: &str = "203.0.113.19";
const NOW_MS: u64 = 1_711_929_570_000;
const TTL_MS: u64 = 60_000;
/// Tokens solved ahead of the timed loops.
const BATCH: usize = 32;
const BITS: u8 = 4;

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the whole timespec it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Runs `f` `iters` times a round; (wall, CPU) µs per call of each round.
fn timed(iters: usize, rounds: usize, mut f: impl FnMut(usize)) -> (Vec<f64>, Vec<f64>) {
    for i in 0..iters / 10 + 1 {
        f(i);
    }
    (0..rounds)
        .map(|_| {
            let (wall, cpu) = (Instant::now(), thread_cpu());
            for i in 0..iters {
                f(i);
            }
            let per = |d: Duration| d.as_secs_f64() * 1e6 / iters as f64;
            (per(wall.elapsed()), per(thread_cpu().saturating_sub(cpu)))
        })
        .unzip()
}

fn show(name: &str, (wall, cpu): &(Vec<f64>, Vec<f64>)) {
    println!(
        "{name:<52} {:>9.1} us CPU {:>9.1} us wall",
        median(cpu),
        median(wall)
    );
}

fn main() {
    let rounds = rounds("EQUIX_COST_ROUNDS");
    let keys = pow::SecretKeys::single(pow::Secret::new(&[7u8; 32]).expect("32-byte key"));
    let expected = pow::Expected {
        binding: pow::Binding {
            policy: 0x5eed,
            client: pow::client_id(IP.as_bytes()),
            work: pow::Work::Equix,
        },
        max_bits: BITS,
    };
    println!("pow-shield equix_cost: median of {rounds} rounds (EQUIX_COST_ROUNDS)");
    println!();

    // ---- verifying: what a paid request costs the worker -------------------
    let solved: Vec<(String, String, String)> = (0..BATCH)
        .map(|_| {
            let c = pow::issue_bound_challenge(
                &keys,
                IP,
                NOW_MS,
                TTL_MS,
                BITS,
                None,
                expected.binding,
                pow::Strike::None,
            )
            .expect("OS RNG");
            let (nonce, solution) = pow::solve_equix(&c.salt, BITS);
            (c.token, nonce.to_string(), pow::encode_solution(&solution))
        })
        .collect();
    let verify = |(token, nonce, solution): &(String, String, String)| {
        let proof = pow::Proof {
            nonce: Some(nonce.as_bytes()),
            solution: Some(solution.as_bytes()),
        };
        pow::verify_paid(
            &keys,
            Some(token.as_bytes()),
            proof,
            IP,
            1,
            NOW_MS,
            TTL_MS,
            Some(&expected),
        )
    };
    assert!(
        solved.iter().all(|s| verify(s).is_ok()),
        "valid solution refused"
    );
    let times = timed(2_000, rounds, |i| {
        black_box(verify(black_box(&solved[i % BATCH])).is_ok());
    });
    show("verify_paid, valid Equi-X (HashX interpreted)", &times);
    let verify_cpu = median(&times.1);

    // The same Equi-X check alone, interpreted and compiled.
    let raw: Vec<(Vec<u8>, Solution)> = solved
        .iter()
        .map(|(token, nonce, solution)| {
            let salt = pow::read_unverified(token).expect("token").salt;
            let bytes = pow::decode_solution(solution.as_bytes()).expect("solution");
            let solution = Solution::try_from_bytes(&bytes).expect("well formed");
            ([salt.as_bytes(), nonce.as_bytes()].concat(), solution)
        })
        .collect();
    for (name, runtime) in [
        (
            "Equi-X verify alone, HashX interpreted",
            RuntimeOption::InterpretOnly,
        ),
        (
            "Equi-X verify alone, HashX compiled",
            RuntimeOption::CompileOnly,
        ),
    ] {
        let mut builder = EquiXBuilder::new();
        builder.runtime(runtime);
        let times = timed(2_000, rounds, |i| {
            let (challenge, solution) = &raw[i % BATCH];
            let ok = builder.build(challenge).and_then(|e| e.verify(solution));
            black_box(ok.is_ok());
        });
        show(name, &times);
    }

    // A random solution: refused before Equi-X (order, then the hash's bits).
    let random = pow::encode_solution(&[0x5a; 16]);
    let times = timed(20_000, rounds, |i| {
        let (token, nonce, _) = &solved[i % BATCH];
        let wrong = (token.clone(), nonce.clone(), random.clone());
        black_box(verify(&wrong).is_err());
    });
    show("verify_paid, random solution (422)", &times);

    // ---- solving: the client's side ----------------------------------------
    println!();
    let salt = "00112233445566778899aabbccddeeff";
    for (name, runtime) in [
        ("compiled", RuntimeOption::CompileOnly),
        ("interpreted", RuntimeOption::InterpretOnly),
    ] {
        let mut builder = EquiXBuilder::new();
        builder.runtime(runtime);
        let mut memory = equix::SolverMemory::new();
        let nonces = 200;
        let (wall, cpu) = (Instant::now(), thread_cpu());
        let mut solutions = 0;
        for nonce in 0..nonces {
            let challenge = format!("{salt}{nonce}");
            if let Ok(equix) = builder.build(challenge.as_bytes()) {
                solutions += equix.solve_with_memory(&mut memory).len();
            }
        }
        let cpu = thread_cpu().saturating_sub(cpu).as_secs_f64();
        println!(
            "Equi-X solve, HashX {name:<12} {:>7.1} solves/s per core (CPU), {:>7.1} wall; {:.2} solutions a nonce",
            f64::from(nonces) / cpu,
            f64::from(nonces) / wall.elapsed().as_secs_f64(),
            f64::from(solutions as u32) / f64::from(nonces)
        );
    }
    println!(
        "Equi-X solver memory: {:.2} MB a solving thread",
        pow::EquixSolver::MEMORY as f64 / 1e6
    );
    println!();
    println!(
        "budget: a verification at most 100 us: {verify_cpu:.1} us CPU ({})",
        if verify_cpu <= 100.0 {
            "within"
        } else {
            "OVER"
        }
    );
}

//! Paying a challenge of either algorithm (docs/protocol.md §5): a SHA-256
//! nonce, or a nonce and its Equi-X solution. The Equi-X search spreads
//! nonces over the threads one at a time (each is milliseconds of work and
//! about 1.8 MB of solver memory per thread) and stops at the first nonce
//! with a solution whose hash has the bits asked.
//!
//! A build without the `equix` feature has no Equi-X solver: an Equi-X
//! challenge is refused at once with [`Error::UnsupportedWork`], naming
//! the algorithm, rather than searched for in vain.

use std::sync::atomic::AtomicBool;
#[cfg(feature = "equix")]
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(feature = "equix")]
use std::time::Instant;

#[cfg(feature = "equix")]
use pow_shield_protocol::hex_digits_for_bits;
use pow_shield_protocol::{encode_solution, wire, Work, EQUIX_SOLUTION_LEN};

use super::{solve_bits_until, Nonce, SolveOptions};
use crate::Error;

/// What pays a challenge: `X-PoW-Nonce`, and for Equi-X `X-PoW-Solution`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proof {
    /// The nonce, sent in decimal.
    pub nonce: Nonce,
    /// The Equi-X solution of `salt ‖ nonce` (none for SHA-256).
    pub solution: Option<[u8; EQUIX_SOLUTION_LEN]>,
}

impl From<Nonce> for Proof {
    fn from(nonce: Nonce) -> Proof {
        Proof {
            nonce,
            solution: None,
        }
    }
}

impl Proof {
    /// The request headers that carry it, after `X-PoW-Challenge`.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![(wire::HEADER_NONCE, self.nonce.to_string())];
        if let Some(solution) = &self.solution {
            headers.push((wire::HEADER_SOLUTION, encode_solution(solution)));
        }
        headers
    }
}

/// Pays `bits` of `work` for `salt` with every configured thread, until
/// `stop` is set or the options' time runs out.
pub fn solve_work_until(
    salt: &str,
    bits: u8,
    work: Work,
    opts: &SolveOptions,
    stop: &AtomicBool,
) -> Result<Proof, Error> {
    match work {
        Work::Sha256 => solve_bits_until(salt, bits, opts, stop).map(Proof::from),
        Work::Equix => solve_equix_until(salt, bits, opts, stop),
    }
}

/// Whether this build can pay `work`.
pub fn can_solve(work: Work) -> bool {
    work.is_built_in()
}

#[cfg(not(feature = "equix"))]
fn solve_equix_until(_: &str, _: u8, _: &SolveOptions, _: &AtomicBool) -> Result<Proof, Error> {
    Err(Error::UnsupportedWork {
        algorithm: Work::Equix.name().to_owned(),
    })
}

#[cfg(feature = "equix")]
fn solve_equix_until(
    salt: &str,
    bits: u8,
    opts: &SolveOptions,
    stop: &AtomicBool,
) -> Result<Proof, Error> {
    use pow_shield_protocol::EquixSolver;

    let difficulty = hex_digits_for_bits(bits);
    super::check_max(difficulty, opts)?;
    let start = Instant::now();
    let deadline = opts.max_solve_time.and_then(|t| start.checked_add(t));
    let next = AtomicU64::new(0);
    let found = AtomicBool::new(false);
    let worker = || -> Option<Proof> {
        let mut solver = EquixSolver::new();
        while !found.load(Ordering::Relaxed)
            && !stop.load(Ordering::Relaxed)
            && deadline.is_none_or(|d| Instant::now() < d)
        {
            let nonce = next.fetch_add(1, Ordering::Relaxed);
            if let Some(solution) = solver.try_nonce(salt, nonce, bits) {
                found.store(true, Ordering::Relaxed);
                return Some(Proof {
                    nonce: Nonce(nonce),
                    solution: Some(solution),
                });
            }
        }
        None
    };
    // (Threads that found one at once: the smallest nonce is sent.)
    let proof = std::thread::scope(|scope| {
        let workers: Vec<_> = (1..opts.thread_count())
            .filter_map(|_| std::thread::Builder::new().spawn_scoped(scope, worker).ok())
            .collect();
        let own = worker();
        workers
            .into_iter()
            .filter_map(|w| w.join().ok().flatten())
            .chain(own)
            .min_by_key(|p| p.nonce)
    });
    match proof {
        Some(proof) => Ok(proof),
        None if stop.load(Ordering::Relaxed) => Err(Error::Cancelled),
        None => Err(Error::Timeout {
            difficulty,
            after: start.elapsed(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SALT: &str = "00112233445566778899aabbccddeeff";

    #[test]
    fn a_sha256_proof_is_a_nonce_header_alone() {
        let proof = solve_work_until(
            SALT,
            8,
            Work::Sha256,
            &SolveOptions::default(),
            &AtomicBool::new(false),
        )
        .unwrap();
        assert_eq!(proof.solution, None);
        assert_eq!(
            proof.headers(),
            vec![(wire::HEADER_NONCE, proof.nonce.to_string())]
        );
    }

    #[cfg(feature = "equix")]
    #[test]
    fn an_equix_proof_pays_its_challenge_on_every_thread_count() {
        for threads in [1, 2] {
            let opts = SolveOptions {
                threads,
                ..SolveOptions::default()
            };
            let proof =
                solve_work_until(SALT, 3, Work::Equix, &opts, &AtomicBool::new(false)).unwrap();
            let headers = proof.headers();
            let p = pow_shield_protocol::Proof {
                nonce: Some(headers[0].1.as_bytes()),
                solution: Some(headers[1].1.as_bytes()),
            };
            assert_eq!(headers[1].0, wire::HEADER_SOLUTION);
            assert!(pow_shield_protocol::proves(
                Work::Equix,
                SALT.as_bytes(),
                p,
                3
            ));
        }
    }

    #[cfg(not(feature = "equix"))]
    #[test]
    fn without_an_equix_solver_an_equix_challenge_is_refused_naming_the_algorithm() {
        let got = solve_work_until(
            SALT,
            1,
            Work::Equix,
            &SolveOptions::default(),
            &AtomicBool::new(false),
        );
        let err = got.unwrap_err();
        assert!(err.to_string().contains("equix"), "{err}");
        assert!(!can_solve(Work::Equix));
    }
}

//! Equi-X work (feature `equix`; docs/protocol.md §5): the `equix` crate's
//! puzzle for the challenge string `salt ‖ nonce` (the salt text, the
//! nonce's ASCII digits), and a solution pays when
//! `SHA-256(salt ‖ nonce ‖ solution)` starts with the bits asked. Each
//! nonce has about two solutions; each bit doubles the nonces to try.
//!
//! Verifying runs HashX interpreted: the module verifies inside nginx's
//! workers, where the compiler would map executable memory at run time
//! (refused under W^X policies and seccomp filters, and a writable code
//! page in a process that faces the network), and it buys nothing there:
//! building the hash program costs most of a verification either way
//! (docs/equix.md, "Inside the worker"). Solvers compile it when the
//! `equix-compiler` feature is on and the CPU allows (six times faster).

use ::equix::{EquiXBuilder, RuntimeOption, Solution, SolverMemory};
use sha2::{Digest, Sha256};

use crate::algorithm::EQUIX_SOLUTION_LEN;
use crate::work::{leading_zero_bits, MAX_NONCE_DIGITS};

/// `SHA-256(salt ‖ nonce ‖ solution)`: what must start with the bits.
pub fn solution_hash(salt: &[u8], nonce: &[u8], solution: &[u8; EQUIX_SOLUTION_LEN]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(salt);
    hasher.update(nonce);
    hasher.update(solution);
    hasher.finalize().into()
}

/// Whether `solution` pays `bits` for `salt ‖ nonce`, cheapest check
/// first: the items' order (no hashing), the hash's zero bits (one
/// SHA-256), then Equi-X itself (its HashX program built and run
/// interpreted, tens of microseconds).
pub(crate) fn verify(
    salt: &[u8],
    nonce: &[u8],
    solution: &[u8; EQUIX_SOLUTION_LEN],
    bits: u8,
) -> bool {
    let Ok(parsed) = Solution::try_from_bytes(solution) else {
        return false;
    };
    if leading_zero_bits(&solution_hash(salt, nonce, solution)) < u32::from(bits) {
        return false;
    }
    let mut builder = EquiXBuilder::new();
    builder.runtime(RuntimeOption::InterpretOnly);
    let challenge = challenge(salt, nonce);
    builder
        .build(&challenge)
        .and_then(|equix| equix.verify(&parsed))
        .is_ok()
}

/// `salt ‖ nonce`, the Equi-X challenge string.
fn challenge(salt: &[u8], nonce: &[u8]) -> Vec<u8> {
    let mut challenge = Vec::with_capacity(salt.len() + nonce.len());
    challenge.extend_from_slice(salt);
    challenge.extend_from_slice(nonce);
    challenge
}

/// One solving thread's state: Equi-X's solver memory (about 1.8 MB),
/// allocated once and reused for every nonce.
pub struct EquixSolver {
    memory: SolverMemory,
    builder: EquiXBuilder,
}

impl Default for EquixSolver {
    fn default() -> Self {
        Self::new()
    }
}

impl EquixSolver {
    /// A solver that compiles HashX where it can (`equix-compiler`), else
    /// interprets it.
    pub fn new() -> EquixSolver {
        let mut builder = EquiXBuilder::new();
        builder.runtime(match cfg!(feature = "equix-compiler") {
            true => RuntimeOption::TryCompile,
            false => RuntimeOption::InterpretOnly,
        });
        EquixSolver {
            memory: SolverMemory::new(),
            builder,
        }
    }

    /// Bytes of memory a solve works in (Equi-X's solver memory).
    pub const MEMORY: usize = SolverMemory::SIZE;

    /// `compiled` or `interpreted`: how HashX runs here (the compiler
    /// falls back to the interpreter where it cannot map code).
    pub fn runtime(&self) -> &'static str {
        match self.builder.build(b"pow-shield runtime probe") {
            Ok(equix) if equix.runtime() == ::equix::Runtime::Compiled => "compiled",
            _ => "interpreted",
        }
    }

    /// A solution of `salt ‖ nonce` whose hash has `bits`, if this nonce
    /// has one (the first such, in the solver's order). A nonce whose
    /// HashX program Equi-X refuses (a small fraction) has none.
    pub fn try_nonce(
        &mut self,
        salt: &str,
        nonce: u64,
        bits: u8,
    ) -> Option<[u8; EQUIX_SOLUTION_LEN]> {
        let mut digits = [0u8; MAX_NONCE_DIGITS];
        let nonce = crate::work::write_decimal(nonce, &mut digits);
        let equix = self
            .builder
            .build(&challenge(salt.as_bytes(), nonce))
            .ok()?;
        equix
            .solve_with_memory(&mut self.memory)
            .iter()
            .map(Solution::to_bytes)
            .find(|s| {
                leading_zero_bits(&solution_hash(salt.as_bytes(), nonce, s)) >= u32::from(bits)
            })
    }

    /// Every solution of `salt ‖ nonce` (0 to 8; about 2 on average).
    pub fn solutions(&mut self, salt: &str, nonce: u64) -> Vec<[u8; EQUIX_SOLUTION_LEN]> {
        let mut digits = [0u8; MAX_NONCE_DIGITS];
        let nonce = crate::work::write_decimal(nonce, &mut digits);
        match self.builder.build(&challenge(salt.as_bytes(), nonce)) {
            Ok(equix) => equix
                .solve_with_memory(&mut self.memory)
                .iter()
                .map(Solution::to_bytes)
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// The smallest nonce `0, 1, 2, …` with a solution that pays `bits`, and
/// that solution: the plain reference search on one thread (the clients
/// spread nonces over their threads). About `2^bits / 2` nonces.
pub fn solve_equix(salt: &str, bits: u8) -> (u64, [u8; EQUIX_SOLUTION_LEN]) {
    let mut solver = EquixSolver::new();
    (0..u64::MAX)
        .find_map(|nonce| solver.try_nonce(salt, nonce, bits).map(|s| (nonce, s)))
        .unwrap_or((u64::MAX, [0; EQUIX_SOLUTION_LEN]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{encode_solution, proves, Proof, Work};

    const SALT: &str = "00112233445566778899aabbccddeeff";

    fn pays(nonce: &str, solution: &[u8; 16], bits: u8) -> bool {
        let text = encode_solution(solution);
        let proof = Proof {
            nonce: Some(nonce.as_bytes()),
            solution: Some(text.as_bytes()),
        };
        proves(Work::Equix, SALT.as_bytes(), proof, bits)
    }

    #[test]
    fn the_solution_found_for_a_nonce_pays_its_bits() {
        let (nonce, solution) = solve_equix(SALT, 4);
        assert!(pays(&nonce.to_string(), &solution, 4));
        assert!(
            leading_zero_bits(&solution_hash(
                SALT.as_bytes(),
                nonce.to_string().as_bytes(),
                &solution
            )) >= 4
        );
    }

    #[test]
    fn a_solution_pays_for_its_own_nonce_only() {
        let (nonce, solution) = solve_equix(SALT, 1);
        assert!(pays(&nonce.to_string(), &solution, 1));
        assert!(!pays(&(nonce + 1).to_string(), &solution, 0));
        assert!(!pays(&format!("0{nonce}"), &solution, 0), "007 is not 7");
    }

    #[test]
    fn a_solution_moved_to_another_salt_pays_nothing() {
        let (nonce, solution) = solve_equix(SALT, 1);
        let other = "ffeeddccbbaa99887766554433221100";
        let (digits, text) = (nonce.to_string(), encode_solution(&solution));
        let proof = Proof {
            nonce: Some(digits.as_bytes()),
            solution: Some(text.as_bytes()),
        };
        assert!(!proves(Work::Equix, other.as_bytes(), proof, 0));
    }

    #[test]
    fn a_solution_short_of_the_bits_asked_does_not_pay() {
        let mut solver = EquixSolver::new();
        let (nonce, solution) = (0u64..)
            .find_map(|n| {
                solver.solutions(SALT, n).into_iter().find_map(|s| {
                    let zeros = leading_zero_bits(&solution_hash(
                        SALT.as_bytes(),
                        n.to_string().as_bytes(),
                        &s,
                    ));
                    (zeros < 3).then_some((n, s))
                })
            })
            .unwrap();
        assert!(pays(&nonce.to_string(), &solution, 0));
        assert!(!pays(&nonce.to_string(), &solution, 3));
    }

    #[test]
    fn random_bytes_are_no_solution() {
        for seed in 0u8..32 {
            let junk: [u8; 16] =
                core::array::from_fn(|i| seed.wrapping_mul(37).wrapping_add(i as u8 * 11));
            assert!(!pays("1", &junk, 0), "{junk:?}");
        }
    }

    mod verified {
        use super::*;
        use crate::{
            client_id, issue_bound_challenge, solve_bits, verify_paid, Binding, Challenge,
            Expected, Rejection, Secret, SecretKeys, Strike,
        };

        const IP: &str = "203.0.113.19";
        const NOW: u64 = 1_711_929_570_000;

        fn keys() -> SecretKeys {
            SecretKeys::single(Secret::new(&[b'e'; 32]).unwrap())
        }

        fn expected(work: Work) -> Expected {
            Expected {
                binding: Binding {
                    policy: 7,
                    client: client_id(IP.as_bytes()),
                    work,
                },
                max_bits: 8,
            }
        }

        fn issued(work: Work, bits: u8) -> Challenge {
            let binding = expected(work).binding;
            issue_bound_challenge(&keys(), IP, NOW, 60_000, bits, None, binding, Strike::None)
                .unwrap()
        }

        fn verify(
            c: &Challenge,
            nonce: &str,
            solution: Option<&str>,
            at: Work,
        ) -> Result<u8, Rejection> {
            let proof = Proof {
                nonce: Some(nonce.as_bytes()),
                solution: solution.map(str::as_bytes),
            };
            verify_paid(
                &keys(),
                Some(c.token.as_bytes()),
                proof,
                IP,
                1,
                NOW,
                60_000,
                Some(&expected(at)),
            )
            .map(|solved| solved.bits)
        }

        #[test]
        fn an_equix_token_says_so_and_is_paid_by_its_nonce_and_solution() {
            let c = issued(Work::Equix, 3);
            assert_eq!(c.work, Work::Equix);
            assert_eq!(crate::read_unverified(&c.token).unwrap().work, Work::Equix);
            let (nonce, solution) = solve_equix(&c.salt, 3);
            let text = encode_solution(&solution);
            assert_eq!(
                verify(&c, &nonce.to_string(), Some(&text), Work::Equix),
                Ok(3)
            );
        }

        #[test]
        fn a_sha256_nonce_for_an_equix_challenge_is_a_wrong_solution() {
            let c = issued(Work::Equix, 3);
            let nonce = solve_bits(&c.salt, 3).to_string();
            assert_eq!(
                verify(&c, &nonce, None, Work::Equix),
                Err(Rejection::WrongSolution)
            );
            assert_eq!(Rejection::WrongSolution.status(), 422);
        }

        #[test]
        fn a_token_of_the_other_algorithm_is_a_wrong_solution() {
            let sha = issued(Work::Sha256, 3);
            let nonce = solve_bits(&sha.salt, 3).to_string();
            assert_eq!(verify(&sha, &nonce, None, Work::Sha256), Ok(3));
            assert_eq!(
                verify(&sha, &nonce, None, Work::Equix),
                Err(Rejection::WrongSolution)
            );
            let eqx = issued(Work::Equix, 3);
            let (nonce, solution) = solve_equix(&eqx.salt, 3);
            let text = encode_solution(&solution);
            let got = verify(&eqx, &nonce.to_string(), Some(&text), Work::Sha256);
            assert_eq!(got, Err(Rejection::WrongSolution));
        }

        #[test]
        fn a_sha256_token_is_unchanged_by_equix() {
            let c = issued(Work::Sha256, 3);
            use base64::Engine;
            let payload = c.token.split('.').next().unwrap();
            let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(payload)
                .unwrap();
            assert!(!String::from_utf8(json).unwrap().contains("alg"));
            let equix = issued(Work::Equix, 3);
            let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(equix.token.split('.').next().unwrap())
                .unwrap();
            assert!(String::from_utf8(json)
                .unwrap()
                .ends_with(r#","alg":"equix"}"#));
        }
    }
}

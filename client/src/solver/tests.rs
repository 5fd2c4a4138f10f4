//! The solver: its nonces against the protocol crate and the generic
//! hasher, its limits. (The engines themselves are tested in the protocol
//! crate, protocol/src/search/tests.rs.)

use super::*;
use sha2::{Digest, Sha256};

const SALT: &str = "00112233445566778899aabbccddeeff";

fn opts(threads: usize) -> SolveOptions {
    SolveOptions {
        threads,
        ..SolveOptions::default()
    }
}

fn hex_digest(salt: &str, nonce: u64) -> String {
    let digest = Sha256::digest(format!("{salt}{nonce}"));
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn one_thread_finds_the_smallest_nonce_like_the_protocol_crate() {
    for d in 1..=4 {
        let nonce = solve(SALT, d, &opts(1)).unwrap();
        assert_eq!(
            nonce.0,
            pow_shield_protocol::solve(SALT, d),
            "difficulty {d}"
        );
    }
}

/// Smallest nonces, cross-checked with Python's hashlib.
const VECTORS: [(&str, u8, u64); 10] = [
    ("00112233445566778899aabbccddeeff", 1, 78),
    ("00112233445566778899aabbccddeeff", 2, 79),
    ("00112233445566778899aabbccddeeff", 3, 1373),
    ("00112233445566778899aabbccddeeff", 4, 60803),
    ("00112233445566778899aabbccddeeff", 5, 1192874),
    ("5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a", 1, 19),
    ("5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a", 2, 21),
    ("5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a", 3, 3730),
    ("5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a", 4, 42114),
    ("5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a", 5, 1418755),
];

#[test]
fn one_thread_finds_the_known_smallest_nonces() {
    for (salt, d, nonce) in VECTORS {
        assert_eq!(solve(salt, d, &opts(1)), Ok(Nonce(nonce)), "{salt} {d}");
    }
}

#[test]
fn solution_of_an_issued_challenge_passes_the_modules_verification() {
    use pow_shield_protocol::{issue_challenge_bits, verify_solution, Secret, SecretKeys};
    let keys = SecretKeys::single(Secret::new(&[b'k'; 32]).unwrap());
    // Hex-digit prices (4, 12, 20 bits) solved as hex, and bits prices.
    let hex = [1u8, 3, 5].map(|d| (4 * d, Some(d)));
    let bits = [3u8, 10, 17].map(|b| (b, None));
    for (price, hex_digits) in hex.into_iter().chain(bits) {
        let c = issue_challenge_bits(&keys, "192.0.2.1", 1_000, 60_000, price).unwrap();
        let nonce = match hex_digits {
            Some(d) => solve(&c.salt, d, &opts(0)),
            None => solve_bits(&c.salt, c.bits, &opts(0)),
        };
        let nonce = nonce.unwrap().to_string();
        let verified = verify_solution(
            &keys,
            Some(c.token.as_bytes()),
            Some(nonce.as_bytes()),
            "192.0.2.1",
            1,
            1_000,
            60_000,
        );
        assert_eq!(verified.map(|s| s.bits), Ok(price), "{price} bits");
    }
}

#[test]
fn solutions_verify_with_the_protocol_check() {
    for threads in [1, 2, 4] {
        for d in 1..=5 {
            let nonce = solve(SALT, d, &opts(threads)).unwrap();
            assert!(pow_shield_protocol::meets_difficulty(
                SALT.as_bytes(),
                nonce.to_string().as_bytes(),
                d
            ));
        }
    }
}

#[test]
fn salt_of_any_length_gives_a_valid_nonce() {
    // Tails of 0, 1, 50 (two blocks' worth with digits) and 63 bytes,
    // and salts longer than a block.
    for len in [0usize, 1, 31, 50, 55, 63, 64, 65, 100, 130] {
        let salt: String = "a".repeat(len);
        let nonce = solve(&salt, 3, &opts(2)).unwrap();
        assert!(
            hex_digest(&salt, nonce.0).starts_with("000"),
            "salt length {len}"
        );
    }
}

#[test]
fn difficulty_above_the_limit_is_refused_before_any_work() {
    let o = SolveOptions {
        max_difficulty: Some(4),
        ..SolveOptions::default()
    };
    assert!(matches!(
        solve(SALT, 5, &o),
        Err(Error::TooHard {
            difficulty: 5,
            max: 4
        })
    ));
}

#[test]
fn solve_time_limit_gives_timeout() {
    let o = SolveOptions {
        threads: 1,
        max_solve_time: Some(Duration::from_millis(50)),
        ..SolveOptions::default()
    };
    assert!(matches!(
        solve(SALT, 30, &o),
        Err(Error::Timeout { difficulty: 30, .. })
    ));
}

#[test]
fn one_challenge_is_given_up_after_30_s_by_default_none_is_no_limit() {
    assert_eq!(DEFAULT_MAX_SOLVE_TIME, Duration::from_secs(30));
    assert_eq!(
        SolveOptions::default().max_solve_time,
        Some(Duration::from_secs(30))
    );
    let unlimited = SolveOptions {
        threads: 1,
        max_solve_time: None,
        ..SolveOptions::default()
    };
    assert_eq!(solve(SALT, 2, &unlimited), Ok(Nonce(79)));
}

#[test]
fn a_set_stop_flag_cancels_the_solve() {
    let stop = AtomicBool::new(true);
    assert_eq!(
        solve_until(SALT, 30, &opts(2), &stop),
        Err(Error::Cancelled)
    );
}

#[test]
fn a_solve_time_beyond_any_instant_is_no_limit() {
    let o = SolveOptions {
        threads: 1,
        max_solve_time: Some(Duration::MAX),
        ..SolveOptions::default()
    };
    assert_eq!(solve(SALT, 2, &o), Ok(Nonce(79)));
}

#[test]
fn difficulty_above_64_is_unsolvable() {
    assert!(matches!(
        solve(SALT, 65, &opts(1)),
        Err(Error::Unsolvable { difficulty: 65 })
    ));
}

#[test]
fn a_bits_price_gives_the_smallest_nonce_of_the_protocol_reference() {
    for bits in [1u8, 5, 9, 13, 18] {
        for threads in [1, 3] {
            assert_eq!(
                solve_bits(SALT, bits, &opts(threads)).map(|n| n.0),
                Ok(pow_shield_protocol::solve_bits(SALT, bits)),
                "{bits} bits, {threads} threads"
            );
        }
    }
}

#[test]
fn max_difficulty_in_hex_digits_refuses_a_bits_price_above_four_times_it() {
    let o = SolveOptions {
        max_difficulty: Some(4),
        ..SolveOptions::default()
    };
    assert!(solve_bits(SALT, 16, &o).is_ok());
    assert_eq!(
        solve_bits(SALT, 17, &o),
        Err(Error::TooHard {
            difficulty: 5,
            max: 4
        })
    );
}

#[test]
fn the_engine_is_named() {
    let name = engine_name();
    assert!(name.starts_with("sha-ni") || name == "portable", "{name}");
}

//! The solver: its nonces against the protocol crate and the generic
//! hasher, its limits, and its digit arithmetic.

use super::*;

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
    use pow_shield_protocol::{issue_challenge, verify_solution, Secret, SecretKeys};
    let keys = SecretKeys::single(Secret::new(&[b'k'; 32]).unwrap());
    for d in [1, 3, 5] {
        let c = issue_challenge(&keys, "192.0.2.1", 1_000, 60_000, d).unwrap();
        let nonce = solve(&c.salt, c.difficulty, &opts(0)).unwrap().to_string();
        let verified = verify_solution(
            &keys,
            Some(c.token.as_bytes()),
            Some(nonce.as_bytes()),
            "192.0.2.1",
            1,
            1_000,
            60_000,
        );
        assert!(verified.is_ok(), "difficulty {d}: {verified:?}");
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
fn nonces_crossing_a_digit_boundary_are_hashed_with_their_length() {
    let prefix = Prefix::new(SALT.as_bytes());
    // 9 → 10 and 99 → 100 inside one chunk: each found nonce must be
    // the first in the range whose real digest has one leading zero.
    let found = search_chunk(&prefix, 5, 5000, 1).unwrap();
    let expected = (5..5000)
        .find(|n| hex_digest(SALT, *n).starts_with('0'))
        .unwrap();
    assert_eq!(found, expected);
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
fn zero_nibble_check_matches_hex_text() {
    let state = [0x0000_0fff, 0, 0, 0, 0, 0, 0, 0];
    for d in 0..=5 {
        assert!(has_leading_zero_nibbles(&state, d), "{d}");
    }
    assert!(!has_leading_zero_nibbles(&state, 6));
    let zeros = [0u32; 8];
    assert!(has_leading_zero_nibbles(&zeros, 64));
    assert!(!has_leading_zero_nibbles(
        &[0, 0x1000_0000, 0, 0, 0, 0, 0, 0],
        9
    ));
    assert!(has_leading_zero_nibbles(
        &[0, 0x0fff_ffff, 0, 0, 0, 0, 0, 0],
        9
    ));
}

#[test]
fn decimal_increment_carries() {
    let mut d = *b"0199";
    increment_decimal(&mut d);
    assert_eq!(&d, b"0200");
    let mut d = [0u8; 3];
    write_decimal(7, &mut d);
    assert_eq!(&d, b"007");
    assert_eq!(decimal_len(0), 1);
    assert_eq!(decimal_len(9), 1);
    assert_eq!(decimal_len(10), 2);
    assert_eq!(decimal_len(u64::MAX), 20);
}

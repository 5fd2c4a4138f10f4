//! Every engine against the plain SHA-256: the same smallest nonce for every
//! salt length (so every position of the digits in the block, one block or
//! two), every digit count boundary, and prices of 0 to 64 bits.

use super::*;
use crate::work::solve_bits;

fn engines() -> Vec<Engine> {
    let mut all = vec![Engine::Portable];
    if Engine::ShaNi.is_available() {
        all.push(Engine::ShaNi);
    }
    all
}

/// The smallest nonce of `from..to` by the reference rule, hashing each.
fn reference(salt: &[u8], bits: u32, from: u64, to: u64) -> Option<u64> {
    (from..to).find(|n| meets_bits_u32(salt, n.to_string().as_bytes(), bits))
}

/// The first two digest words of `salt ++ nonce`, by sha2's hasher.
fn first_words(salt: &[u8], nonce: u64) -> u64 {
    let digest = Sha256::new()
        .chain_update(salt)
        .chain_update(nonce.to_string())
        .finalize();
    u64::from_be_bytes(digest[..8].try_into().unwrap())
}

/// A small deterministic generator (xorshift64*), for the property test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn every_engine_finds_the_references_smallest_nonce_for_every_salt_length() {
    for engine in engines() {
        for len in 0..=130usize {
            let salt: Vec<u8> = (0..len)
                .map(|i| b"0123456789abcdef"[(i * 7 + len) % 16])
                .collect();
            let search = Search::with_engine(&salt, 6, engine);
            assert_eq!(
                search.run(0, 5_000),
                reference(&salt, 6, 0, 5_000),
                "{engine:?} salt length {len}"
            );
        }
    }
}

#[test]
fn every_engine_agrees_across_digit_count_boundaries() {
    let salt = b"00112233445566778899aabbccddeeff";
    for engine in engines() {
        let search = Search::with_engine(salt, 5, engine);
        for (from, to) in [
            (0, 12),
            (7, 13),
            (95, 1_005),
            (9_990, 10_011),
            (999_999_990, 1_000_000_100),
            (u64::MAX - 2_000, u64::MAX),
            (
                10_000_000_000_000_000_000 - 500,
                10_000_000_000_000_000_000 + 500,
            ),
        ] {
            assert_eq!(
                search.run(from, to),
                reference(salt, 5, from, to),
                "{engine:?} {from}..{to}"
            );
        }
    }
}

#[test]
fn every_engine_finds_the_smallest_nonce_of_protocol_solve_bits() {
    for engine in engines() {
        for salt in [
            "00112233445566778899aabbccddeeff",
            "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        ] {
            for bits in [1u8, 4, 9, 13, 16, 18] {
                assert_eq!(
                    Search::with_engine(salt.as_bytes(), u32::from(bits), engine).run(0, u64::MAX),
                    Some(solve_bits(salt, bits)),
                    "{engine:?} {salt} {bits}"
                );
            }
        }
    }
}

#[test]
fn property_an_engine_accepts_exactly_the_nonces_sha256_accepts() {
    // Random salts (lengths 1..100), ranges and prices: each engine's
    // answer is the reference's, and a nonce it returns meets the price
    // by sha2's digest.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..300 {
        let len = 1 + (rng.next() % 100) as usize;
        let salt: Vec<u8> = (0..len)
            .map(|_| b"0123456789abcdef"[(rng.next() % 16) as usize])
            .collect();
        let from = match case % 3 {
            0 => rng.next() % 1_000,
            1 => rng.next() % 1_000_000_000_000,
            _ => rng.next(),
        };
        let to = from.saturating_add(1 + rng.next() % 3_000);
        let bits = (rng.next() % 12) as u32;
        let expected = reference(&salt, bits, from, to);
        for engine in engines() {
            let got = Search::with_engine(&salt, bits, engine).run(from, to);
            assert_eq!(got, expected, "{engine:?} case {case}");
            if let Some(n) = got {
                assert!(first_words(&salt, n).leading_zeros() >= bits);
            }
        }
    }
}

#[test]
fn prices_up_to_64_bits_read_the_first_two_digest_words() {
    // The ranges are too short to meet these prices, so each engine must
    // agree with the reference that nothing there qualifies; and the words
    // it reads are the digest's (checked through a zero-bit price).
    let salt = b"6c17a261001047c8b3e83591c3269c2e";
    for engine in engines() {
        for bits in [33u32, 40, 48, 63, 64, 65, 200] {
            assert_eq!(
                Search::with_engine(salt, bits, engine).run(0, 300),
                None,
                "{bits}"
            );
        }
        assert_eq!(Search::with_engine(salt, 0, engine).run(41, 300), Some(41));
    }
}

#[test]
fn the_portable_engine_can_always_be_forced_and_named() {
    let s = Search::with_engine(b"ab", 1, Engine::Portable);
    assert_eq!(s.engine(), Engine::Portable);
    assert_eq!(Engine::Portable.name(), "portable");
    assert_eq!(Engine::Portable.lanes(), 1);
    assert!(Engine::detect().is_available());
}

#[test]
fn decimal_digits_add_with_carry() {
    let mut d = *b"0199";
    add_decimal(&mut d, 1);
    assert_eq!(&d, b"0200");
    add_decimal(&mut d, 9);
    assert_eq!(&d, b"0209");
    add_decimal(&mut d, 2);
    assert_eq!(&d, b"0211");
    let mut buf = [0u8; 20];
    for n in [0u64, 7, 10, 99, 12345, u64::MAX] {
        let len = decimal_len(n);
        write_decimal(n, &mut buf[..len]);
        assert_eq!(&buf[..len], n.to_string().as_bytes());
    }
}

#[test]
fn the_raw_engines_agree_with_the_reference_before_any_confirmation() {
    // run() re-checks every candidate with sha2; this checks the engines
    // themselves, so a fast path that proposed wrong nonces would show.
    let salt = b"a3f1c9e2b7d04856a1b2c3d4e5f60718";
    for engine in engines() {
        let search = Search::with_engine(salt, 8, engine);
        let mut from = 100_000u64;
        while from < 400_000 {
            let raw = search.run_digits(from, 400_000, 6);
            assert_eq!(
                raw,
                reference(salt, 8, from, 400_000),
                "{engine:?} from {from}"
            );
            match raw {
                Some(n) => from = n + 1,
                None => break,
            }
        }
    }
}

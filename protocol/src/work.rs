//! The proof of work itself: `SHA-256(salt ++ nonce)` must start with
//! `bits` zero bits (docs/protocol.md §5). The hex rule of older tokens,
//! `difficulty` leading `'0'` characters, is `4 × difficulty` bits.
//!
//! This is the reference: the module verifies with it, and every fast
//! solver is checked against it.

use sha2::{Digest, Sha256};

/// Most ASCII digits a nonce may have (docs/protocol.md): every `u64` fits.
pub const MAX_NONCE_DIGITS: usize = 20;

/// Whether `hex(sha256(salt ++ nonce))` starts with `difficulty` `'0'`
/// characters. Difficulty 0 is always met; above 64 never.
pub fn meets_difficulty(salt: &[u8], nonce: &[u8], difficulty: u8) -> bool {
    meets_bits_u32(salt, nonce, 4 * u32::from(difficulty))
}

/// Whether `sha256(salt ++ nonce)` starts with `bits` zero bits. 0 is
/// always met; 256 and more (impossible to ask in a `u8`) never.
pub fn meets_bits(salt: &[u8], nonce: &[u8], bits: u8) -> bool {
    meets_bits_u32(salt, nonce, u32::from(bits))
}

pub(crate) fn meets_bits_u32(salt: &[u8], nonce: &[u8], bits: u32) -> bool {
    let mut hasher = Sha256::new();
    hasher.update(salt);
    hasher.update(nonce);
    leading_zero_bits(&hasher.finalize()) >= bits
}

/// How many zero bits `digest` starts with (256 for an all-zero digest).
pub fn leading_zero_bits(digest: &[u8]) -> u32 {
    let mut zeros = 0;
    for byte in digest {
        if *byte != 0 {
            return zeros + byte.leading_zeros();
        }
        zeros += 8;
    }
    zeros
}

/// Whether `nonce` is 1 to 20 ASCII digits (docs/protocol.md).
pub fn is_valid_nonce(nonce: &[u8]) -> bool {
    (1..=MAX_NONCE_DIGITS).contains(&nonce.len()) && nonce.iter().all(u8::is_ascii_digit)
}

/// The smallest nonce `0, 1, 2, …` whose hash with `salt` meets
/// `difficulty` hex zeros: [`solve_bits`] of `4 × difficulty`. A difficulty
/// above 64 can never be met, so it returns `u64::MAX` at once.
pub fn solve(salt: &str, difficulty: u8) -> u64 {
    if usize::from(difficulty) > 2 * 32 {
        return u64::MAX;
    }
    search(salt, 4 * u32::from(difficulty))
}

/// The smallest nonce `0, 1, 2, …` whose hash with `salt` starts with
/// `bits` zero bits; about `2^bits` hashes on average. The salt's hash
/// state is computed once and cloned per attempt. This is the plain
/// reference search; the clients have fast ones.
pub fn solve_bits(salt: &str, bits: u8) -> u64 {
    search(salt, u32::from(bits))
}

fn search(salt: &str, bits: u32) -> u64 {
    let mut salted = Sha256::new();
    salted.update(salt.as_bytes());
    let mut digits = [0u8; MAX_NONCE_DIGITS];
    for nonce in 0..u64::MAX {
        let mut hasher = salted.clone();
        hasher.update(write_decimal(nonce, &mut digits));
        if leading_zero_bits(&hasher.finalize()) >= bits {
            return nonce;
        }
    }
    u64::MAX
}

/// Writes `n` in decimal at the end of `buf` and returns those digits.
pub(crate) fn write_decimal(mut n: u64, buf: &mut [u8; MAX_NONCE_DIGITS]) -> &[u8] {
    let mut start = buf.len();
    for slot in buf.iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
        start -= 1;
        if n == 0 {
            break;
        }
    }
    buf.get(start..).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex_digest(salt: &str, nonce: &str) -> String {
        hex::encode(Sha256::digest(format!("{salt}{nonce}")))
    }

    #[test]
    fn solve_4_returns_the_smallest_nonce_with_4_leading_zeros() {
        let salt = "00112233445566778899aabbccddeeff";
        let nonce = solve(salt, 4);
        assert!(hex_digest(salt, &nonce.to_string()).starts_with("0000"));
        for smaller in 0..nonce {
            assert!(!hex_digest(salt, &smaller.to_string()).starts_with("0000"));
        }
    }

    #[test]
    fn meets_difficulty_agrees_with_hex_prefix_for_odd_and_even_counts() {
        let salt = "00112233445566778899aabbccddeeff";
        for nonce in 0..2000u32 {
            let hex = hex_digest(salt, &nonce.to_string());
            for d in 0..=4u8 {
                let expected = hex.starts_with(&"0".repeat(usize::from(d)));
                assert_eq!(
                    meets_difficulty(salt.as_bytes(), nonce.to_string().as_bytes(), d),
                    expected,
                    "nonce {nonce} difficulty {d}"
                );
            }
        }
    }

    #[test]
    fn meets_bits_agrees_with_the_digest_below_a_power_of_two() {
        let salt = "00112233445566778899aabbccddeeff";
        for nonce in 0..3000u32 {
            let digest = Sha256::digest(format!("{salt}{nonce}"));
            let top = u128::from_be_bytes(digest[..16].try_into().unwrap());
            for bits in 1..=20u8 {
                let expected = top < 1u128 << (128 - u32::from(bits));
                assert_eq!(
                    meets_bits(salt.as_bytes(), nonce.to_string().as_bytes(), bits),
                    expected,
                    "nonce {nonce} bits {bits}"
                );
            }
        }
    }

    #[test]
    fn hex_difficulty_is_four_bits_per_digit() {
        let salt = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";
        for d in 1..=4u8 {
            assert_eq!(solve(salt, d), solve_bits(salt, 4 * d), "difficulty {d}");
        }
    }

    #[test]
    fn solve_bits_returns_the_smallest_nonce_with_that_many_zero_bits() {
        let salt = "00112233445566778899aabbccddeeff";
        for bits in [1u8, 5, 9, 13, 17] {
            let nonce = solve_bits(salt, bits);
            let ok = |n: u64| meets_bits(salt.as_bytes(), n.to_string().as_bytes(), bits);
            assert!(ok(nonce), "bits {bits}");
            assert!((0..nonce).all(|n| !ok(n)), "bits {bits}");
        }
    }

    #[test]
    fn leading_zero_bits_counts_across_bytes() {
        assert_eq!(leading_zero_bits(&[0x80]), 0);
        assert_eq!(leading_zero_bits(&[0x00, 0x01]), 15);
        assert_eq!(leading_zero_bits(&[0x00, 0x00]), 16);
        assert_eq!(leading_zero_bits(&[0x0f, 0xff]), 4);
    }

    #[test]
    fn difficulty_0_is_always_met() {
        assert!(meets_difficulty(b"salt", b"1", 0));
    }

    #[test]
    fn difficulty_above_64_is_never_met() {
        assert!(!meets_difficulty(b"salt", b"1", 65));
        assert_eq!(solve("salt", 65), u64::MAX);
    }

    #[test]
    fn decimal_writer_matches_to_string() {
        let mut buf = [0u8; MAX_NONCE_DIGITS];
        for n in [0u64, 7, 10, 99, 12345, u64::MAX] {
            assert_eq!(write_decimal(n, &mut buf), n.to_string().as_bytes());
        }
    }

    #[test]
    fn nonce_of_20_digits_is_valid_21_is_not() {
        assert!(is_valid_nonce(b"18446744073709551615"));
        assert!(is_valid_nonce(b"99999999999999999999"));
        assert!(!is_valid_nonce(b"123456789012345678901"));
    }

    #[test]
    fn nonce_must_be_non_empty_ascii_digits() {
        for bad in [
            &b""[..],
            b"-1",
            b"+1",
            b" 1",
            b"1 ",
            b"0x1f",
            b"1.0",
            "٣".as_bytes(),
        ] {
            assert!(!is_valid_nonce(bad), "{bad:?}");
        }
        assert!(is_valid_nonce(b"0"));
        assert!(is_valid_nonce(b"007"));
    }
}

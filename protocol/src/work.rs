//! The proof of work itself: `hex(SHA-256(salt ++ nonce))` must start with
//! `difficulty` zeros (docs/protocol.md §5).

use sha2::{Digest, Sha256};

/// Most ASCII digits a nonce may have (docs/protocol.md): every `u64` fits.
pub const MAX_NONCE_DIGITS: usize = 20;

/// Whether `hex(sha256(salt ++ nonce))` starts with `difficulty` `'0'`
/// characters. Difficulty 0 is always met; above 64 never.
pub fn meets_difficulty(salt: &[u8], nonce: &[u8], difficulty: u8) -> bool {
    let mut hasher = Sha256::new();
    hasher.update(salt);
    hasher.update(nonce);
    has_leading_zero_nibbles(&hasher.finalize(), difficulty)
}

/// Whether `nonce` is 1 to 20 ASCII digits (docs/protocol.md).
pub fn is_valid_nonce(nonce: &[u8]) -> bool {
    (1..=MAX_NONCE_DIGITS).contains(&nonce.len()) && nonce.iter().all(u8::is_ascii_digit)
}

/// The smallest nonce `0, 1, 2, …` whose hash with `salt` meets
/// `difficulty`; about `16^difficulty` hashes on average. The salt's hash
/// state is computed once and cloned per attempt. A difficulty above 64 can
/// never be met, so it returns `u64::MAX` at once instead of searching forever.
pub fn solve(salt: &str, difficulty: u8) -> u64 {
    if usize::from(difficulty) > 2 * 32 {
        return u64::MAX;
    }
    let mut salted = Sha256::new();
    salted.update(salt.as_bytes());
    let mut digits = [0u8; MAX_NONCE_DIGITS];
    for nonce in 0..u64::MAX {
        let mut hasher = salted.clone();
        hasher.update(write_decimal(nonce, &mut digits));
        if has_leading_zero_nibbles(&hasher.finalize(), difficulty) {
            return nonce;
        }
    }
    u64::MAX
}

/// Writes `n` in decimal at the end of `buf` and returns those digits.
fn write_decimal(mut n: u64, buf: &mut [u8; MAX_NONCE_DIGITS]) -> &[u8] {
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

/// Whether the first `zeros` hex digits of `digest` are `'0'`.
fn has_leading_zero_nibbles(digest: &[u8], zeros: u8) -> bool {
    let zeros = usize::from(zeros);
    let whole = zeros / 2;
    if whole > digest.len() {
        return false;
    }
    let whole_bytes_zero = digest.iter().take(whole).all(|b| *b == 0);
    let odd_nibble_zero = zeros % 2 == 0 || digest.get(whole).is_some_and(|b| b >> 4 == 0);
    whole_bytes_zero && odd_nibble_zero
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

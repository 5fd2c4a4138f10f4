//! What a solution is (`pow_shield_work`, docs/protocol.md §5): a SHA-256
//! search, or an Equi-X solution whose hash has the zero bits asked. The
//! token says which (`alg`, absent for SHA-256), the response says it in
//! `X-PoW-Algorithm` and the body's `algorithm`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use crate::work::{is_valid_nonce, meets_bits};

/// Bytes of an Equi-X solution: eight 16-bit items, little-endian.
pub const EQUIX_SOLUTION_LEN: usize = 16;

/// Characters of an Equi-X solution in unpadded base64url (`X-PoW-Solution`).
pub const EQUIX_SOLUTION_B64_LEN: usize = 22;

/// The proof of work a challenge asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Work {
    /// `SHA-256(salt ‖ nonce)` starts with the bits asked.
    #[default]
    Sha256,
    /// An Equi-X solution for `salt ‖ nonce` whose
    /// `SHA-256(salt ‖ nonce ‖ solution)` starts with the bits asked.
    Equix,
}

impl Work {
    /// Its name in the token, the body and `X-PoW-Algorithm`.
    pub const fn name(self) -> &'static str {
        match self {
            Work::Sha256 => "sha256",
            Work::Equix => "equix",
        }
    }

    /// The algorithm a name stands for (exact, lower case).
    pub fn from_name(name: &str) -> Option<Work> {
        match name {
            "sha256" => Some(Work::Sha256),
            "equix" => Some(Work::Equix),
            _ => None,
        }
    }

    /// Whether this build can check (and solve) it: Equi-X needs the
    /// `equix` feature.
    pub const fn is_built_in(self) -> bool {
        match self {
            Work::Sha256 => true,
            Work::Equix => cfg!(feature = "equix"),
        }
    }
}

/// What a client sent to pay: `X-PoW-Nonce`, and with Equi-X
/// `X-PoW-Solution` (both as sent, unchecked).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Proof<'a> {
    pub nonce: Option<&'a [u8]>,
    pub solution: Option<&'a [u8]>,
}

/// Decodes `X-PoW-Solution`: exactly 22 characters of canonical unpadded
/// base64url for 16 bytes, so a solution has one spelling.
pub fn decode_solution(text: &[u8]) -> Option<[u8; EQUIX_SOLUTION_LEN]> {
    if text.len() != EQUIX_SOLUTION_B64_LEN {
        return None;
    }
    // One spare byte: the decoder's length estimate for 22 characters is 17.
    let mut buf = [0u8; EQUIX_SOLUTION_LEN + 1];
    match URL_SAFE_NO_PAD.decode_slice(text, &mut buf) {
        Ok(EQUIX_SOLUTION_LEN) => {
            let mut solution = [0u8; EQUIX_SOLUTION_LEN];
            solution.copy_from_slice(buf.get(..EQUIX_SOLUTION_LEN)?);
            Some(solution)
        }
        _ => None,
    }
}

/// `X-PoW-Solution` of a solution.
pub fn encode_solution(solution: &[u8; EQUIX_SOLUTION_LEN]) -> String {
    URL_SAFE_NO_PAD.encode(solution)
}

/// Whether `proof` pays `bits` of `work` for `salt`: the nonce is 1..=20
/// digits, and for Equi-X the solution's hash has the bits (checked first:
/// a SHA-256) and then the solution is Equi-X's for `salt ‖ nonce` (tens
/// of microseconds). Without the `equix` feature no Equi-X proof pays.
pub fn proves(work: Work, salt: &[u8], proof: Proof<'_>, bits: u8) -> bool {
    let Some(nonce) = proof.nonce.filter(|n| is_valid_nonce(n)) else {
        return false;
    };
    match work {
        Work::Sha256 => meets_bits(salt, nonce, bits),
        Work::Equix => proof
            .solution
            .and_then(decode_solution)
            .is_some_and(|solution| equix_proves(salt, nonce, &solution, bits)),
    }
}

#[cfg(feature = "equix")]
fn equix_proves(salt: &[u8], nonce: &[u8], solution: &[u8; EQUIX_SOLUTION_LEN], bits: u8) -> bool {
    crate::equix_work::verify(salt, nonce, solution, bits)
}

#[cfg(not(feature = "equix"))]
fn equix_proves(_: &[u8], _: &[u8], _: &[u8; EQUIX_SOLUTION_LEN], _: u8) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_nothing_else_is_an_algorithm() {
        for work in [Work::Sha256, Work::Equix] {
            assert_eq!(Work::from_name(work.name()), Some(work));
        }
        for other in ["", "SHA256", "equi-x", "argon2"] {
            assert_eq!(Work::from_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_solution_has_one_spelling_of_22_characters() {
        let solution: [u8; 16] = core::array::from_fn(|i| i as u8 * 17);
        let text = encode_solution(&solution);
        assert_eq!(text.len(), EQUIX_SOLUTION_B64_LEN);
        assert_eq!(decode_solution(text.as_bytes()), Some(solution));
        let mut padded = text.clone();
        padded.push_str("==");
        // The last character carries 4 unused bits, zero when canonical.
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut other_tail = text.clone().into_bytes();
        let last = ALPHABET.iter().position(|c| *c == other_tail[21]).unwrap();
        other_tail[21] = ALPHABET[last + 1];
        for bad in [
            padded.as_bytes(),
            &text.as_bytes()[..21],
            &other_tail,
            b"++++++++++++++++++++++",
        ] {
            assert_eq!(decode_solution(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_sha256_proof_is_the_nonce_alone_whatever_solution_comes_with_it() {
        let salt = b"00112233445566778899aabbccddeeff";
        let proof = Proof {
            nonce: Some(b"60803"),
            solution: Some(b"junk"),
        };
        assert!(proves(Work::Sha256, salt, proof, 18));
    }

    #[test]
    fn an_equix_challenge_is_never_paid_by_a_nonce_alone() {
        let salt = b"00112233445566778899aabbccddeeff";
        let proof = Proof {
            nonce: Some(b"60803"),
            solution: None,
        };
        assert!(!proves(Work::Equix, salt, proof, 1));
    }
}

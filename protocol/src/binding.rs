//! What a token buys (docs/protocol.md §4, "What a token binds"): the
//! issuing location's price policy, the client key it was issued to, and
//! whether its 429 counted a strike. A solution buys one request only where
//! the same policy holds, for the same client key; paying it takes back its
//! own strike and no other.
//!
//! The two identities are 53-bit integers (exact as JSON numbers in every
//! client's parser), signed with the rest of the payload.

use sha2::{Digest, Sha256};

/// Identities fit in 53 bits: JSON numbers every parser reads exactly.
const ID_MASK: u64 = (1 << 53) - 1;

/// The signed fields that bind a token to what it buys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The issuing location's price policy ([`policy_id`] of its limits
    /// and difficulty): the same on every node and across reloads.
    pub policy: u64,
    /// The client key ([`client_id`]).
    pub client: u64,
}

/// What a verifying location asks of a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected {
    pub binding: Binding,
    /// The highest price this location may ask (its `max=`, else its
    /// base), in bits: what a token without a binding (issued by a node
    /// that predates it, during a rolling upgrade) must prove.
    pub max_bits: u8,
}

/// The identity of a client key: the first 53 bits of its SHA-256 (the
/// key itself, an API key say, never appears in a token).
pub fn client_id(key: &[u8]) -> u64 {
    let digest = Sha256::digest(key);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first) & ID_MASK
}

/// The identity of a price policy described by `words` (the caller's
/// canonical numbers: each limit's requests, window and counting, the
/// difficulty's base, maximum and step): FNV-1a over their bytes, the same
/// in every process and on every node.
pub fn policy_id(words: &[u64]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for word in words {
        for b in word.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h & ID_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_fit_in_a_json_number_every_parser_reads_exactly() {
        for key in [&b""[..], b"203.0.113.7", &[0xff; 200]] {
            assert!(client_id(key) < 1 << 53);
        }
        assert!(policy_id(&[u64::MAX; 9]) < 1 << 53);
    }

    #[test]
    fn a_policy_id_depends_on_every_word_and_its_place() {
        let base = policy_id(&[3, 3_600_000, 0, 4, 4, 1]);
        assert_eq!(base, policy_id(&[3, 3_600_000, 0, 4, 4, 1]));
        assert_ne!(base, policy_id(&[2, 3_600_000, 0, 4, 4, 1]));
        assert_ne!(base, policy_id(&[3, 3_600_000, 0, 4, 16, 1]));
        assert_ne!(policy_id(&[1, 2]), policy_id(&[2, 1]));
    }

    #[test]
    fn two_keys_of_one_address_are_two_clients() {
        assert_ne!(client_id(b"api:5000"), client_id(b"api:37644"));
        assert_eq!(client_id(b"api:5000"), client_id(b"api:5000"));
    }
}

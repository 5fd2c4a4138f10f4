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
    /// What pays it (the token's `alg`): the location's `pow_shield_work`.
    pub work: crate::Work,
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

    use crate::{
        issue_bound_challenge, issue_challenge_bits_with_salt, meets_bits, solve_bits,
        verify_bound, Challenge, Rejection, Secret, SecretKeys, Solved, Strike,
    };

    const IP: &str = "203.0.113.19";
    const NOW: u64 = 1_711_929_570_000;
    const TTL: u64 = 60_000;
    const SALT: [u8; 16] = [0x5a; 16];

    fn keys() -> SecretKeys {
        SecretKeys::single(Secret::new(&[b'a'; 32]).unwrap())
    }

    const POLICY: u64 = 0x1234;

    fn expected(policy: u64, key: &[u8], max_bits: u8) -> Expected {
        Expected {
            binding: Binding {
                policy,
                client: client_id(key),
                work: crate::Work::Sha256,
            },
            max_bits,
        }
    }

    /// When the 429s of these tests say a slot frees.
    const RETRY_AT: u64 = NOW + 3_000;

    fn bound(bits: u8, policy: u64, key: &[u8], struck: bool) -> Challenge {
        let binding = Binding {
            policy,
            client: client_id(key),
            work: crate::Work::Sha256,
        };
        let strike = match struck {
            true => Strike::Counted {
                retry_at_ms: RETRY_AT,
            },
            false => Strike::None,
        };
        issue_bound_challenge(&keys(), IP, NOW, TTL, bits, None, binding, strike).unwrap()
    }

    fn verify_expecting(c: &Challenge, nonce: &str, exp: &Expected) -> Result<Solved, Rejection> {
        verify_bound(
            &keys(),
            Some(c.token.as_bytes()),
            Some(nonce.as_bytes()),
            IP,
            1,
            NOW,
            TTL,
            Some(exp),
        )
    }

    #[test]
    fn a_bound_token_buys_a_request_under_its_own_policy_for_its_own_key() {
        let c = bound(8, POLICY, b"api:5000", true);
        let nonce = solve_bits(&c.salt, 8).to_string();
        let solved = verify_expecting(&c, &nonce, &expected(POLICY, b"api:5000", 16)).unwrap();
        assert!(solved.struck);
        assert_eq!(solved.bits, 8, "the price it was issued at");
    }

    #[test]
    fn a_cheap_locations_token_buys_nothing_at_a_dear_one() {
        let c = bound(4, POLICY, IP.as_bytes(), false);
        let nonce = solve_bits(&c.salt, 12).to_string();
        let got = verify_expecting(&c, &nonce, &expected(POLICY + 1, IP.as_bytes(), 16));
        assert_eq!(got, Err(Rejection::WrongPolicy));
        assert_eq!(Rejection::WrongPolicy.status(), 409);
        assert!(Rejection::WrongPolicy.wants_fresh_challenge());
    }

    #[test]
    fn a_token_of_one_client_key_buys_nothing_for_another_key_of_its_address() {
        let c = bound(4, POLICY, b"api:5000", true);
        let nonce = solve_bits(&c.salt, 4).to_string();
        let got = verify_expecting(&c, &nonce, &expected(POLICY, b"api:37644", 4));
        assert_eq!(got, Err(Rejection::WrongClient));
        assert_eq!(Rejection::WrongClient.status(), 403);
        assert_eq!(
            Rejection::WrongClient.message(),
            "Challenge was not issued for this client"
        );
    }

    #[test]
    fn a_token_says_whether_its_429_counted_a_strike() {
        let c = bound(4, POLICY, IP.as_bytes(), false);
        let nonce = solve_bits(&c.salt, 4).to_string();
        let solved = verify_expecting(&c, &nonce, &expected(POLICY, IP.as_bytes(), 4)).unwrap();
        assert_eq!((solved.struck, solved.retry_at_ms), (false, None));
    }

    #[test]
    fn a_token_whose_429_struck_says_when_its_retry_after_ends() {
        let c = bound(4, POLICY, IP.as_bytes(), true);
        let nonce = solve_bits(&c.salt, 4).to_string();
        let solved = verify_expecting(&c, &nonce, &expected(POLICY, IP.as_bytes(), 4)).unwrap();
        assert_eq!((solved.struck, solved.retry_at_ms), (true, Some(RETRY_AT)));
        let old = issue_challenge_bits_with_salt(&keys(), IP, NOW, TTL, 4, SALT);
        let nonce = solve_bits(&old.salt, 4).to_string();
        let exp = expected(POLICY, IP.as_bytes(), 4);
        let solved = verify_expecting(&old, &nonce, &exp).unwrap();
        assert_eq!(
            solved.retry_at_ms, None,
            "a token of an older node has none"
        );
    }

    #[test]
    fn an_unbound_token_of_an_older_node_must_prove_the_locations_highest_price() {
        let c = issue_challenge_bits_with_salt(&keys(), IP, NOW, TTL, 4, SALT);
        let cheap = (0u64..)
            .find(|n| {
                let n = n.to_string();
                meets_bits(c.salt.as_bytes(), n.as_bytes(), 4)
                    && !meets_bits(c.salt.as_bytes(), n.as_bytes(), 12)
            })
            .unwrap()
            .to_string();
        let exp = expected(POLICY, IP.as_bytes(), 12);
        assert_eq!(
            verify_expecting(&c, &cheap, &exp),
            Err(Rejection::WrongSolution)
        );
        let dear = solve_bits(&c.salt, 12).to_string();
        let solved = verify_expecting(&c, &dear, &exp).unwrap();
        assert!(solved.struck, "such tokens took back a strike, as before");
    }
}

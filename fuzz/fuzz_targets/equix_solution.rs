//! `X-PoW-Solution` and Equi-X verification (docs/protocol.md §5): any
//! header text, with any nonce, through `decode_solution` and through
//! `verify_paid` of a signed Equi-X token. A header decodes only from its
//! one canonical spelling (22 characters that encode it again to the same
//! text); nothing panics; and a solution is accepted only if it is Equi-X's
//! for `salt ‖ nonce` with the bits asked, checked again here with the
//! `equix` crate's own verifier.
//!
//! Input: `bits` (1 byte, taken mod 9: prices an input can meet), the
//! nonce's length (1 byte, mod 24), the nonce, then the header text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pow_shield_protocol::{
    self as pow, client_id, decode_solution, encode_solution, solution_hash, Binding, Expected,
    Proof, Secret, SecretKeys, Strike, Work,
};

const CLIENT_IP: &str = "203.0.113.19";
/// 2024-04-01.
const NOW_MS: u64 = 1_711_929_570_000;
const TTL_MS: u64 = 60_000;

fuzz_target!(|data: &[u8]| {
    let (bits, rest) = data.split_first().map_or((0, &[][..]), |(b, r)| (*b % 9, r));
    let (len, rest) = rest.split_first().map_or((0, &[][..]), |(b, r)| (usize::from(*b % 24), r));
    let (nonce, header) = rest.split_at(len.min(rest.len()));

    let decoded = decode_solution(header);
    if let Some(solution) = decoded {
        assert_eq!(encode_solution(&solution).as_bytes(), header, "one spelling");
    }

    let keys = SecretKeys::single(Secret::new(&[b'k'; 32]).expect("32 bytes"));
    let binding = Binding {
        policy: 7,
        client: client_id(CLIENT_IP.as_bytes()),
        work: Work::Equix,
    };
    let Ok(c) = pow::issue_bound_challenge(
        &keys,
        CLIENT_IP,
        NOW_MS,
        TTL_MS,
        bits.max(1),
        None,
        binding,
        Strike::None,
    ) else {
        return;
    };
    let expected = Expected {
        binding,
        max_bits: bits.max(1),
    };
    let proof = Proof {
        nonce: Some(nonce),
        solution: Some(header),
    };
    let got = pow::verify_paid(
        &keys,
        Some(c.token.as_bytes()),
        proof,
        CLIENT_IP,
        1,
        NOW_MS,
        TTL_MS,
        Some(&expected),
    );
    if got.is_ok() {
        let solution = decoded.expect("an accepted solution decodes");
        assert!(pow::is_valid_nonce(nonce));
        let hash = solution_hash(c.salt.as_bytes(), nonce, &solution);
        assert!(pow::leading_zero_bits(&hash) >= u32::from(bits.max(1)));
        let challenge = [c.salt.as_bytes(), nonce].concat();
        assert!(equix::verify_bytes(&challenge, &solution).is_ok(), "Equi-X's own verdict");
    }
});

//! `X-PoW-Challenge` / `X-PoW-Nonce` as a client may send them, through
//! `pow::verify_solution`.
//!
//! Input: `flags`, `min_bits`, then `token` `\n` `nonce`.
//! flags bit 0: `token` is a JSON payload, signed here with the verifier's
//! key (so the fuzzer gets past the MAC to the payload checks);
//! bit 1: no token header; bit 2: no nonce header.
#![no_main]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use libfuzzer_sys::fuzz_target;
use pow_shield_core::protocol::{self as pow, Secret, SecretKeys, MAX_BITS, MIN_BITS};
use sha2::Sha256;

const KEY: [u8; 32] = [b'k'; 32];
const CLIENT_IP: &str = "203.0.113.19";
/// 2024-04-01; the seeds' payloads are issued at this time.
const NOW_MS: u64 = 1_711_929_570_000;
const TTL_MS: u64 = 60_000;

fn sign(json: &[u8]) -> Vec<u8> {
    let mut token = URL_SAFE_NO_PAD.encode(json);
    // ok: HMAC takes a key of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(&KEY).expect("any key length");
    mac.update(token.as_bytes());
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(mac.finalize().into_bytes(), &mut token);
    token.into_bytes()
}

fuzz_target!(|data: &[u8]| {
    let [flags, min, rest @ ..] = data else {
        return;
    };
    // The configuration only ever passes 1..=48 bits.
    let min_bits = MIN_BITS + min % MAX_BITS;
    let (token, nonce) = match rest.iter().position(|b| *b == b'\n') {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, &[][..]),
    };
    let signed;
    let token = if flags & 1 != 0 {
        signed = sign(token);
        &signed[..]
    } else {
        token
    };
    let keys = SecretKeys::single(Secret::new(&KEY).expect("32-byte key"));
    let result = pow::verify_solution(
        &keys,
        (flags & 2 == 0).then_some(token),
        (flags & 4 == 0).then_some(nonce),
        CLIENT_IP,
        min_bits,
        NOW_MS,
        TTL_MS,
    );
    if let Ok(solved) = result {
        assert!(
            pow::is_valid_nonce(nonce),
            "accepted a nonce that is not 1-20 digits"
        );
        assert!(
            solved.bits >= min_bits,
            "accepted below the minimum"
        );
    }
});

//! Issuing, signing and reading tokens.

use super::*;
use hmac::Mac;

fn keys() -> SecretKeys {
    SecretKeys::single(Secret::new(&[b'k'; 32]).unwrap())
}

fn decode_json(token: &str) -> serde_json::Value {
    let payload = token.split('.').next().unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

#[test]
fn a_token_is_sent_ahead_only_when_its_challenge_counted_no_strike() {
    let binding = crate::Binding {
        policy: 1,
        client: 2,
        work: crate::Work::Sha256,
    };
    let issue = |strike| {
        issue_bound_challenge(
            &keys(),
            "192.0.2.1",
            1_000,
            60_000,
            16,
            None,
            binding,
            strike,
        )
        .unwrap()
        .token
    };
    assert!(sent_ahead(issue(Strike::None).as_bytes()));
    let counted = Strike::Counted { retry_at_ms: 2_000 };
    assert!(!sent_ahead(issue(counted).as_bytes()));
    let unbound = issue_challenge(&keys(), "192.0.2.1", 1_000, 60_000, 4).unwrap();
    assert!(!sent_ahead(unbound.token.as_bytes()), "no st: a 429's");
    assert!(!sent_ahead(b"not a token"));
}

#[test]
fn a_challenge_in_a_generation_signs_it_and_verification_reports_it() {
    let c = issue_challenge_bits_in(&keys(), "192.0.2.1", 1_000, 60_000, 4, Some(42)).unwrap();
    assert_eq!(decode_json(&c.token)["gen"], 42);
    let nonce = crate::solve(&c.salt, 1).to_string();
    let solved = crate::verify_solution(
        &keys(),
        Some(c.token.as_bytes()),
        Some(nonce.as_bytes()),
        "192.0.2.1",
        1,
        2_000,
        60_000,
    )
    .unwrap();
    assert_eq!(solved.generation, Some(42));
    let plain = issue_challenge(&keys(), "192.0.2.1", 1_000, 60_000, 1).unwrap();
    assert!(decode_json(&plain.token).get("gen").is_none(), "left out");
}

#[test]
fn token_is_two_unpadded_base64url_parts() {
    let c = issue_challenge_with_salt(
        &keys(),
        "203.0.113.19",
        1_711_929_570_000,
        60_000,
        5,
        [0xab; 16],
    );
    let (payload, mac) = c.token.split_once('.').unwrap();
    assert!(!payload.is_empty());
    assert_eq!(mac.len(), 43);
    assert!(c
        .token
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.'));
}

#[test]
fn payload_holds_ip_ts_difficulty_salt_and_exp_in_spec_order() {
    let c = issue_challenge_with_salt(
        &keys(),
        "203.0.113.19",
        1_711_929_570_000,
        60_000,
        5,
        [0xab; 16],
    );
    let payload = c.token.split('.').next().unwrap();
    let json = String::from_utf8(URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    assert_eq!(
        json,
        r#"{"ip":"203.0.113.19","ts":1711929570000,"difficulty":5,"salt":"abababababababababababababababab","exp":1711929630000,"bits":20}"#
    );
}

#[test]
fn a_bits_challenge_carries_bits_and_the_hex_digits_that_prove_them() {
    for (bits, hex) in [(1, 1), (4, 1), (5, 2), (18, 5), (20, 5), (48, 12)] {
        let c = issue_challenge_bits_with_salt(&keys(), "::1", 1, 60_000, bits, [7; 16]);
        assert_eq!((c.bits, c.difficulty), (bits, hex), "bits {bits}");
        let json = decode_json(&c.token);
        assert_eq!(json["bits"], u64::from(bits));
        assert_eq!(json["difficulty"], u64::from(hex));
        let info = read_unverified(&c.token).unwrap();
        assert_eq!((info.bits, info.difficulty), (bits, hex));
    }
}

#[test]
fn bits_are_clamped_to_1_through_48_when_issuing() {
    let low = issue_challenge_bits_with_salt(&keys(), "::1", 1, 60_000, 0, [0; 16]);
    let high = issue_challenge_bits_with_salt(&keys(), "::1", 1, 60_000, 49, [0; 16]);
    assert_eq!((low.bits, low.difficulty), (1, 1));
    assert_eq!((high.bits, high.difficulty), (48, 12));
}

#[test]
fn a_token_without_bits_asks_four_bits_per_hex_digit() {
    let json = br#"{"ip":"::1","ts":1,"difficulty":5,"salt":"abababababababababababababababab"}"#;
    let token = sign_payload(&keys().current, json);
    let info = read_unverified(&token).unwrap();
    assert_eq!((info.difficulty, info.bits), (5, 20));
}

#[test]
fn bits_that_disagree_with_the_difficulty_or_exceed_48_are_not_well_formed() {
    for json in [
        &br#"{"ip":"::1","ts":1,"difficulty":4,"salt":"abababababababababababababababab","bits":18}"#[..],
        br#"{"ip":"::1","ts":1,"difficulty":12,"salt":"abababababababababababababababab","bits":49}"#,
        br#"{"ip":"::1","ts":1,"difficulty":1,"salt":"abababababababababababababababab","bits":0}"#,
    ] {
        let token = sign_payload(&keys().current, json);
        assert!(read_unverified(&token).is_none(), "{}", String::from_utf8_lossy(json));
    }
}

#[test]
fn mac_is_hmac_sha256_of_the_encoded_payload_text() {
    let c = issue_challenge_with_salt(&keys(), "::1", 1, 60_000, 4, [1; 16]);
    let (payload, mac) = c.token.split_once('.').unwrap();
    let mut expected = crate::keys::HmacSha256::new_from_slice(&[b'k'; 32]).unwrap();
    expected.update(payload.as_bytes());
    assert_eq!(
        URL_SAFE_NO_PAD.decode(mac).unwrap(),
        expected.finalize().into_bytes().to_vec()
    );
}

#[test]
fn salt_is_32_hex_chars_and_random_per_challenge() {
    let a = issue_challenge(&keys(), "::1", 1, 60_000, 4).unwrap();
    let b = issue_challenge(&keys(), "::1", 1, 60_000, 4).unwrap();
    assert_eq!(a.salt.len(), 32);
    assert!(a
        .salt
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    assert_ne!(a.salt, b.salt);
    assert_eq!(decode_json(&a.token)["salt"], a.salt.as_str());
}

#[test]
fn difficulty_is_clamped_to_1_through_12_when_issuing() {
    assert_eq!(
        issue_challenge_with_salt(&keys(), "::1", 1, 60_000, 0, [0; 16]).difficulty,
        1
    );
    let c = issue_challenge_with_salt(&keys(), "::1", 1, 60_000, 13, [0; 16]);
    assert_eq!(c.difficulty, 12);
    assert_eq!(decode_json(&c.token)["difficulty"], 12);
}

#[test]
fn address_with_quotes_is_json_escaped() {
    let c = issue_challenge_with_salt(&keys(), "a\"b\\c", 1, 60_000, 4, [0; 16]);
    assert_eq!(decode_json(&c.token)["ip"], "a\"b\\c");
}

#[test]
fn read_unverified_gives_the_payload_fields() {
    let c = issue_challenge_with_salt(&keys(), "::1", 7, 60_000, 5, [0xab; 16]);
    let info = read_unverified(&c.token).unwrap();
    assert_eq!(info.ip, "::1");
    assert_eq!(info.issued_at_ms, 7);
    assert_eq!(info.difficulty, 5);
    assert_eq!(info.bits, 20);
    assert_eq!(info.salt, c.salt);
    assert_eq!(info.expires_at_ms, Some(60_007));
    assert!(read_unverified("not a token").is_none());
}

#[test]
fn split_accepts_exactly_one_dot_with_both_parts_non_empty() {
    assert!(TokenParts::split(b"a.b").is_some());
    for bad in [&b""[..], b"ab", b".b", b"a.", b".", b"a.b.c", b"a..b"] {
        assert!(TokenParts::split(bad).is_none(), "{bad:?}");
    }
}

#[test]
fn the_hand_written_payload_is_serdes_json() {
    let every: String = (0u8..0x80).map(char::from).chain(['é', '😀']).collect();
    for ip in ["127.0.0.1", "::1", "unix:", every.as_str()] {
        for extra in [None, Some(0), Some(1), Some(u64::MAX)] {
            for alg in [None, Some("equix")] {
                let payload = Payload {
                    ip: Cow::Borrowed(ip),
                    ts: 1_796_536_657_568,
                    difficulty: 4,
                    salt: Cow::Borrowed("51d3dd2d230d5ddf4425d49e25d39c8b"),
                    exp: extra,
                    gen: extra.map(|n| n / 3),
                    bits: extra.map(|n| n % 49),
                    pol: extra,
                    ck: extra.map(|n| n ^ 5),
                    st: extra.map(|n| (n % 2) as u8),
                    ra: extra,
                    alg: alg.map(Cow::Borrowed),
                };
                assert_eq!(
                    String::from_utf8(payload.to_json()).unwrap(),
                    serde_json::to_string(&payload).unwrap()
                );
            }
        }
        let sparse = Payload {
            ip: Cow::Borrowed(ip),
            ts: 0,
            difficulty: 12,
            salt: Cow::Borrowed("a\"b"),
            exp: None,
            gen: Some(7),
            bits: None,
            pol: None,
            ck: Some(9),
            st: None,
            ra: Some(3),
            alg: None,
        };
        assert_eq!(
            String::from_utf8(sparse.to_json()).unwrap(),
            serde_json::to_string(&sparse).unwrap()
        );
    }
}

#[test]
fn the_salt_is_lower_case_hex() {
    assert_eq!(hex_text(&[0, 0x0f, 0xa5, 0xff]), "000fa5ff");
    let bytes: Vec<u8> = (0..=255).collect();
    assert_eq!(hex_text(&bytes), hex::encode(&bytes));
}

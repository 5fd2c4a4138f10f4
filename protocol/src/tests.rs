//! The verification order of docs/protocol.md §6, row by row, with a fake
//! clock: one table of every row and its edges, over 600 lines because each
//! test is one row's behaviour.
//!
//! Compiled only for `cargo test`: mod.rs declares it `#[cfg(test)] mod tests;`.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use sha2::{Digest, Sha256};

use super::token::sign_payload;
use super::*;

const IP: &str = "203.0.113.19";
const NOW: u64 = 1_711_929_570_000;
const TTL: u64 = 60_000;
const SALT: [u8; 16] = [0x5a; 16];

fn key(byte: u8) -> Secret {
    Secret::new(&[byte; 32]).unwrap()
}

fn keys() -> SecretKeys {
    SecretKeys::single(key(b'a'))
}

fn challenge(difficulty: u8) -> Challenge {
    issue_challenge_with_salt(&keys(), IP, NOW, TTL, difficulty, SALT)
}

/// A challenge at difficulty 2 and its smallest solution.
fn solved() -> (Challenge, String) {
    let c = challenge(2);
    let nonce = solve(&c.salt, c.difficulty).to_string();
    (c, nonce)
}

fn verify_at(
    keys: &SecretKeys,
    token: &str,
    nonce: &str,
    now_ms: u64,
) -> Result<Solved, Rejection> {
    verify_solution(
        keys,
        Some(token.as_bytes()),
        Some(nonce.as_bytes()),
        IP,
        1,
        now_ms,
        TTL,
    )
}

fn verify(token: &str, nonce: &str) -> Result<Solved, Rejection> {
    verify_at(&keys(), token, nonce, NOW)
}

/// A token whose payload text is `payload_text`, correctly signed.
fn signed_text(payload_text: &str) -> String {
    let tag = key(b'a').tag(payload_text.as_bytes());
    format!("{payload_text}.{}", URL_SAFE_NO_PAD.encode(tag))
}

/// A correctly signed token around arbitrary JSON.
fn signed_json(json: &str) -> String {
    sign_payload(&key(b'a'), json.as_bytes())
}

const SALT_HEX: &str = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";

#[test]
fn issued_challenge_verifies_after_solve() {
    let (c, nonce) = solved();
    let ok = verify(&c.token, &nonce).unwrap();
    assert_eq!(ok.bits, 8);
    assert_eq!(ok.issued_at_ms, NOW);
}

#[test]
fn spent_record_lives_until_the_tokens_exp_plus_the_clock_allowance() {
    // Whatever the verifying node's TTLs: the token says when it expires.
    let (c, nonce) = solved();
    let ok = verify(&c.token, &nonce).unwrap();
    assert_eq!(ok.expires_at_ms, Some(NOW + TTL));
    assert_eq!(ok.spent_until_ms(3_600_000), NOW + TTL + FUTURE_SKEW_MS);
    assert_eq!(ok.spent_until_ms(1_000), NOW + TTL + FUTURE_SKEW_MS);
}

#[test]
fn a_token_is_refused_after_its_exp_even_where_the_ttl_is_longer() {
    // Issued where the TTL is 2 s, presented where it is an hour.
    let c = issue_challenge_with_salt(&keys(), IP, NOW, 2_000, 2, SALT);
    let nonce = solve(&c.salt, c.difficulty).to_string();
    let at = |now_ms| {
        verify_solution(
            &keys(),
            Some(c.token.as_bytes()),
            Some(nonce.as_bytes()),
            IP,
            1,
            now_ms,
            3_600_000,
        )
    };
    assert!(at(NOW + 2_000).is_ok());
    assert_eq!(at(NOW + 2_001), Err(Rejection::Expired));
    assert_eq!(at(NOW + 8_000), Err(Rejection::Expired));
}

#[test]
fn a_token_without_exp_expires_by_the_nodes_ttl_and_is_kept_that_long() {
    // From a server that predates `exp` (a rolling upgrade).
    let json = format!(r#"{{"ip":"{IP}","ts":{NOW},"difficulty":2,"salt":"{SALT_HEX}"}}"#);
    let token = signed_json(&json);
    let nonce = solve(SALT_HEX, 2).to_string();
    let ok = verify_at(&keys(), &token, &nonce, NOW + TTL).unwrap();
    assert_eq!(ok.expires_at_ms, None);
    assert_eq!(
        ok.spent_until_ms(3_600_000),
        NOW + 3_600_000 + FUTURE_SKEW_MS
    );
    assert_eq!(
        verify_at(&keys(), &token, &nonce, NOW + TTL + 1),
        Err(Rejection::Expired)
    );
    let info = read_unverified(&token).unwrap();
    assert_eq!(info.expires_at_ms, None);
}

#[test]
fn an_exp_before_ts_is_an_invalid_payload() {
    let json = format!(
        r#"{{"ip":"{IP}","ts":{NOW},"difficulty":2,"salt":"{SALT_HEX}","exp":{}}}"#,
        NOW - 1
    );
    let nonce = solve(SALT_HEX, 2).to_string();
    assert_eq!(
        verify(&signed_json(&json), &nonce),
        Err(Rejection::BadPayload)
    );
}

#[test]
fn random_salt_challenge_verifies_after_solve() {
    let c = issue_challenge(&keys(), IP, NOW, TTL, 3).unwrap();
    let nonce = solve(&c.salt, c.difficulty).to_string();
    assert!(verify(&c.token, &nonce).is_ok());
}

#[test]
fn digest_is_sha256_of_the_token_text() {
    let (c, nonce) = solved();
    let digest: [u8; 32] = Sha256::digest(c.token.as_bytes()).into();
    assert_eq!(verify(&c.token, &nonce).unwrap().digest, digest);
}

#[test]
fn digest_differs_per_token() {
    let a = issue_challenge_with_salt(&keys(), IP, NOW, TTL, 1, [1; 16]);
    let b = issue_challenge_with_salt(&keys(), IP, NOW, TTL, 1, [2; 16]);
    let da = verify(&a.token, &solve(&a.salt, 1).to_string()).unwrap();
    let db = verify(&b.token, &solve(&b.salt, 1).to_string()).unwrap();
    assert_ne!(da.digest, db.digest);
}

// Row 1: 400 Malformed challenge token.

#[test]
fn nonce_without_token_is_malformed_400() {
    let err = verify_solution(&keys(), None, Some(b"1"), IP, 1, NOW, TTL).unwrap_err();
    assert_eq!(err, Rejection::Malformed);
    assert_eq!(err.status(), 400);
}

#[test]
fn token_without_nonce_is_malformed() {
    let (c, _) = solved();
    let got = verify_solution(&keys(), Some(c.token.as_bytes()), None, IP, 1, NOW, TTL);
    assert_eq!(got, Err(Rejection::Malformed));
}

#[test]
fn neither_header_is_malformed() {
    let got = verify_solution(&keys(), None, None, IP, 1, NOW, TTL);
    assert_eq!(got, Err(Rejection::Malformed));
}

#[test]
fn token_that_is_not_a_dot_b_is_malformed() {
    let (c, nonce) = solved();
    let (payload, mac) = c.token.split_once('.').unwrap();
    for bad in [
        String::new(),
        payload.to_owned(),
        format!(".{mac}"),
        format!("{payload}."),
        format!("{payload}.{mac}.{mac}"),
        format!("{payload}..{mac}"),
    ] {
        assert_eq!(verify(&bad, &nonce), Err(Rejection::Malformed), "{bad}");
    }
}

// Row 2: 403 Invalid challenge signature.

#[test]
fn token_signed_with_unknown_key_is_bad_signature_403() {
    let other = SecretKeys::single(key(b'z'));
    let c = issue_challenge_with_salt(&other, IP, NOW, TTL, 2, SALT);
    let nonce = solve(&c.salt, 2).to_string();
    let err = verify(&c.token, &nonce).unwrap_err();
    assert_eq!(err, Rejection::BadSignature);
    assert_eq!(err.status(), 403);
}

#[test]
fn token_signed_with_previous_key_verifies_during_rotation() {
    let old = SecretKeys::single(key(b'a'));
    let c = issue_challenge_with_salt(&old, IP, NOW, TTL, 2, SALT);
    let nonce = solve(&c.salt, 2).to_string();
    let rotated = SecretKeys {
        current: key(b'b'),
        previous: Some(key(b'a')),
    };
    assert!(verify_at(&rotated, &c.token, &nonce, NOW).is_ok());
}

#[test]
fn token_signed_with_retired_key_is_bad_signature() {
    let (c, nonce) = solved();
    let retired = SecretKeys {
        current: key(b'b'),
        previous: Some(key(b'c')),
    };
    assert_eq!(
        verify_at(&retired, &c.token, &nonce, NOW),
        Err(Rejection::BadSignature)
    );
}

#[test]
fn new_challenges_are_signed_with_the_current_key() {
    let rotated = SecretKeys {
        current: key(b'b'),
        previous: Some(key(b'a')),
    };
    let c = issue_challenge_with_salt(&rotated, IP, NOW, TTL, 2, SALT);
    let nonce = solve(&c.salt, 2).to_string();
    let only_new = SecretKeys::single(key(b'b'));
    assert!(verify_at(&only_new, &c.token, &nonce, NOW).is_ok());
}

#[test]
fn tampered_payload_is_bad_signature() {
    let (c, nonce) = solved();
    let (payload, mac) = c.token.split_once('.').unwrap();
    let json = String::from_utf8(URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    let forged = URL_SAFE_NO_PAD.encode(json.replace("\"difficulty\":2", "\"difficulty\":1"));
    assert_ne!(forged, payload);
    assert_eq!(
        verify(&format!("{forged}.{mac}"), &nonce),
        Err(Rejection::BadSignature)
    );
}

#[test]
fn mac_with_base64_padding_is_bad_signature() {
    let (c, nonce) = solved();
    assert_eq!(
        verify(&format!("{}=", c.token), &nonce),
        Err(Rejection::BadSignature)
    );
}

#[test]
fn mac_in_standard_base64_alphabet_is_bad_signature() {
    // Find a token whose MAC uses '-' or '_', then spell it with '+' '/'.
    let (c, nonce) = (1..=255u8)
        .map(|b| issue_challenge_with_salt(&keys(), IP, NOW, TTL, 1, [b; 16]))
        .find(|c| c.token.split_once('.').unwrap().1.contains(['-', '_']))
        .map(|c| {
            let nonce = solve(&c.salt, 1).to_string();
            (c, nonce)
        })
        .unwrap();
    let (payload, mac) = c.token.split_once('.').unwrap();
    let standard = STANDARD.encode(URL_SAFE_NO_PAD.decode(mac).unwrap());
    let standard = standard.trim_end_matches('=');
    assert_eq!(
        verify(&format!("{payload}.{standard}"), &nonce),
        Err(Rejection::BadSignature)
    );
}

#[test]
fn mac_with_non_canonical_trailing_bits_is_bad_signature() {
    // 43 characters carry 258 bits; the last 2 must be zero, so each MAC
    // has one spelling and the replay key (token text) cannot be varied.
    let (c, nonce) = solved();
    let (payload, mac) = c.token.split_once('.').unwrap();
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let last = *mac.as_bytes().last().unwrap();
    let index = alphabet.iter().position(|b| *b == last).unwrap();
    let respelled = char::from(alphabet[index ^ 1]);
    let mac = format!("{}{respelled}", &mac[..mac.len() - 1]);
    assert_eq!(
        verify(&format!("{payload}.{mac}"), &nonce),
        Err(Rejection::BadSignature)
    );
}

#[test]
fn mac_that_is_not_base64url_is_bad_signature() {
    let (c, nonce) = solved();
    let payload = c.token.split_once('.').unwrap().0;
    for mac in ["!", "AAAA", &"*".repeat(43)] {
        assert_eq!(
            verify(&format!("{payload}.{mac}"), &nonce),
            Err(Rejection::BadSignature),
            "{mac}"
        );
    }
}

// Row 3: 400 Invalid payload encoding (only reachable with a valid MAC).

#[test]
fn signed_payload_that_is_not_base64url_is_bad_payload_400() {
    let err = verify(&signed_text("not*base64"), "1").unwrap_err();
    assert_eq!(err, Rejection::BadPayload);
    assert_eq!(err.status(), 400);
}

#[test]
fn signed_payload_with_base64_padding_is_bad_payload() {
    let json = format!(r#"{{"ip":"{IP}","ts":{NOW},"difficulty":1,"salt":"{SALT_HEX}"}}"#);
    let padded = STANDARD.encode(format!("{json} "));
    assert!(padded.ends_with('='));
    assert_eq!(
        verify(&signed_text(&padded), "1"),
        Err(Rejection::BadPayload)
    );
}

#[test]
fn signed_payload_that_is_not_json_object_with_spec_fields_is_bad_payload() {
    let cases = [
        "not json".to_owned(),
        format!(r#"["{IP}",{NOW},1,"{SALT_HEX}"]"#),
        format!(r#"{{"ip":"{IP}","ts":{NOW},"difficulty":1}}"#),
        format!(r#"{{"ts":{NOW},"difficulty":1,"salt":"{SALT_HEX}"}}"#),
        format!(r#"{{"ip":"{IP}","ts":"{NOW}","difficulty":1,"salt":"{SALT_HEX}"}}"#),
        format!(r#"{{"ip":"{IP}","ts":{NOW}.5,"difficulty":1,"salt":"{SALT_HEX}"}}"#),
        format!(r#"{{"ip":"{IP}","ts":-1,"difficulty":1,"salt":"{SALT_HEX}"}}"#),
        format!(r#"{{"ip":1,"ts":{NOW},"difficulty":1,"salt":"{SALT_HEX}"}}"#),
        format!(r#"{{"ip":"{IP}","ts":{NOW},"difficulty":"1","salt":"{SALT_HEX}"}}"#),
        format!(
            r#"{{"ip":"{IP}","ts":{NOW},"difficulty":1,"salt":"not hex, not hex, not hex, 32ch"}}"#
        ),
        format!(
            r#"{{"ip":"{IP}","ts":{NOW},"difficulty":1,"salt":"5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"}}"#
        ),
        format!(r#"{{"ip":"{IP}","ts":{NOW},"difficulty":1,"salt":"{SALT_HEX}"}} trailing"#),
        format!(r#"{{"ip":"{IP}","ip":"{IP}","ts":{NOW},"difficulty":1,"salt":"{SALT_HEX}"}}"#),
    ];
    for json in cases {
        assert_eq!(
            verify(&signed_json(&json), "1"),
            Err(Rejection::BadPayload),
            "{json}"
        );
    }
}

#[test]
fn signed_difficulty_outside_1_through_12_is_bad_payload() {
    for difficulty in [0, 13, 300] {
        let json =
            format!(r#"{{"ip":"{IP}","ts":{NOW},"difficulty":{difficulty},"salt":"{SALT_HEX}"}}"#);
        assert_eq!(
            verify(&signed_json(&json), "1"),
            Err(Rejection::BadPayload),
            "{difficulty}"
        );
    }
}

#[test]
fn signed_payload_over_1024_bytes_is_bad_payload() {
    let json = format!(
        r#"{{"ip":"{IP}","ts":{NOW},"difficulty":1,"salt":"{SALT_HEX}","pad":"{}"}}"#,
        "x".repeat(MAX_PAYLOAD_LEN)
    );
    assert_eq!(verify(&signed_json(&json), "1"), Err(Rejection::BadPayload));
}

#[test]
fn extra_payload_fields_are_ignored() {
    let json = format!(
        r#"{{"v":2,"ip":"{IP}","ts":{NOW},"difficulty":1,"salt":"{SALT_HEX}","why":{{"a":[1]}}}}"#
    );
    let nonce = solve(SALT_HEX, 1).to_string();
    assert!(verify(&signed_json(&json), &nonce).is_ok());
}

// Row 4: 403 Challenge was not issued for this IP.

#[test]
fn challenge_for_another_ip_is_wrong_ip_403() {
    let (c, nonce) = solved();
    let err = verify_solution(
        &keys(),
        Some(c.token.as_bytes()),
        Some(nonce.as_bytes()),
        "203.0.113.20",
        1,
        NOW,
        TTL,
    )
    .unwrap_err();
    assert_eq!(err, Rejection::WrongIp);
    assert_eq!(err.status(), 403);
}

#[test]
fn address_with_json_escapes_matches_its_unescaped_form() {
    let ip = "unix:/run/\"odd\"";
    let c = issue_challenge_with_salt(&keys(), ip, NOW, TTL, 1, SALT);
    let nonce = solve(&c.salt, 1).to_string();
    let got = verify_solution(
        &keys(),
        Some(c.token.as_bytes()),
        Some(nonce.as_bytes()),
        ip,
        1,
        NOW,
        TTL,
    );
    assert!(got.is_ok());
}

// Row 5: 410 Challenge expired.

#[test]
fn token_exactly_ttl_old_is_accepted() {
    let (c, nonce) = solved();
    assert!(verify_at(&keys(), &c.token, &nonce, NOW + TTL).is_ok());
}

#[test]
fn token_older_than_ttl_is_expired_410() {
    let (c, nonce) = solved();
    let err = verify_at(&keys(), &c.token, &nonce, NOW + TTL + 1).unwrap_err();
    assert_eq!(err, Rejection::Expired);
    assert_eq!(err.status(), 410);
}

#[test]
fn token_5_seconds_in_the_future_is_accepted() {
    let (c, nonce) = solved();
    assert!(verify_at(&keys(), &c.token, &nonce, NOW - 5_000).is_ok());
}

#[test]
fn token_5001_ms_in_the_future_is_expired() {
    let (c, nonce) = solved();
    assert_eq!(
        verify_at(&keys(), &c.token, &nonce, NOW - 5_001),
        Err(Rejection::Expired)
    );
}

#[test]
fn extreme_timestamps_do_not_overflow() {
    let c = issue_challenge_with_salt(&keys(), IP, u64::MAX, TTL, 1, SALT);
    let nonce = solve(&c.salt, 1).to_string();
    let ok = verify_at(&keys(), &c.token, &nonce, u64::MAX).unwrap();
    assert_eq!(ok.spent_until_ms(u64::MAX), u64::MAX);
    assert_eq!(
        verify_at(&keys(), &c.token, &nonce, 0),
        Err(Rejection::Expired)
    );
}

// Row 6: 422 Incorrect PoW solution.

#[test]
fn wrong_nonce_is_wrong_solution_422() {
    let c = challenge(2);
    let wrong = (0u64..)
        .find(|n| !meets_difficulty(c.salt.as_bytes(), n.to_string().as_bytes(), 2))
        .unwrap();
    let err = verify(&c.token, &wrong.to_string()).unwrap_err();
    assert_eq!(err, Rejection::WrongSolution);
    assert_eq!(err.status(), 422);
}

#[test]
fn nonce_that_is_not_digits_is_wrong_solution() {
    let (c, nonce) = solved();
    for bad in [
        String::new(),
        format!(" {nonce}"),
        format!("+{nonce}"),
        "abc".into(),
    ] {
        assert_eq!(
            verify(&c.token, &bad),
            Err(Rejection::WrongSolution),
            "{bad:?}"
        );
    }
}

#[test]
fn solution_of_20_digits_is_accepted() {
    let c = challenge(1);
    let nonce = (10_000_000_000_000_000_000u64..)
        .map(|n| n.to_string())
        .find(|n| meets_difficulty(c.salt.as_bytes(), n.as_bytes(), 1))
        .unwrap();
    assert_eq!(nonce.len(), 20);
    assert!(verify(&c.token, &nonce).is_ok());
}

#[test]
fn solution_of_21_digits_is_wrong_solution_even_if_the_hash_fits() {
    let c = challenge(1);
    let nonce = (0u32..)
        .map(|n| format!("1{n:020}"))
        .find(|n| meets_difficulty(c.salt.as_bytes(), n.as_bytes(), 1))
        .unwrap();
    assert_eq!(nonce.len(), 21);
    assert_eq!(verify(&c.token, &nonce), Err(Rejection::WrongSolution));
}

#[test]
fn token_easier_than_the_location_minimum_needs_the_minimum_zeros() {
    let c = challenge(1);
    let nonce = solve(&c.salt, 1).to_string();
    assert!(!meets_difficulty(c.salt.as_bytes(), nonce.as_bytes(), 5));
    let got = verify_solution(
        &keys(),
        Some(c.token.as_bytes()),
        Some(nonce.as_bytes()),
        IP,
        20,
        NOW,
        TTL,
    );
    assert_eq!(got, Err(Rejection::WrongSolution));
}

#[test]
fn solved_difficulty_is_the_stricter_of_token_and_minimum() {
    let c = challenge(1);
    let nonce = solve(&c.salt, 3).to_string();
    let got = verify_solution(
        &keys(),
        Some(c.token.as_bytes()),
        Some(nonce.as_bytes()),
        IP,
        12,
        NOW,
        TTL,
    );
    assert_eq!(got.unwrap().bits, 12);
}

// Bits (docs/protocol.md §5): the token's exact requirement.

fn bits_challenge(bits: u8) -> Challenge {
    issue_challenge_bits_with_salt(&keys(), IP, NOW, TTL, bits, SALT)
}

#[test]
fn a_nonce_with_the_tokens_bits_is_accepted_though_short_of_its_hex_digits() {
    // 18 bits: the token says difficulty 5 (20 bits) for hex-only clients.
    let c = bits_challenge(18);
    let nonce = (0u64..)
        .find(|n| {
            let n = n.to_string();
            meets_bits(c.salt.as_bytes(), n.as_bytes(), 18)
                && !meets_bits(c.salt.as_bytes(), n.as_bytes(), 19)
        })
        .unwrap()
        .to_string();
    assert!(!meets_difficulty(
        c.salt.as_bytes(),
        nonce.as_bytes(),
        c.difficulty
    ));
    assert_eq!(verify(&c.token, &nonce).map(|s| s.bits), Ok(18));
}

#[test]
fn an_old_clients_hex_solution_of_a_bits_challenge_is_accepted() {
    for bits in [5u8, 9, 10, 11] {
        let c = bits_challenge(bits);
        let nonce = solve(&c.salt, c.difficulty).to_string();
        assert!(verify(&c.token, &nonce).is_ok(), "bits {bits}");
    }
}

#[test]
fn a_nonce_one_bit_short_of_the_tokens_bits_is_wrong_solution() {
    let c = bits_challenge(11);
    let short = (0u64..)
        .map(|n| n.to_string())
        .find(|n| {
            meets_bits(c.salt.as_bytes(), n.as_bytes(), 10)
                && !meets_bits(c.salt.as_bytes(), n.as_bytes(), 11)
        })
        .unwrap();
    assert_eq!(verify(&c.token, &short), Err(Rejection::WrongSolution));
}

#[test]
fn a_token_without_bits_needs_four_bits_per_hex_digit() {
    let json = format!(r#"{{"ip":"{IP}","ts":{NOW},"difficulty":2,"salt":"{SALT_HEX}"}}"#);
    let token = signed_json(&json);
    let seven = (0u64..)
        .map(|n| n.to_string())
        .find(|n| {
            meets_bits(SALT_HEX.as_bytes(), n.as_bytes(), 7)
                && !meets_bits(SALT_HEX.as_bytes(), n.as_bytes(), 8)
        })
        .unwrap();
    assert_eq!(verify(&token, &seven), Err(Rejection::WrongSolution));
    let eight = solve_bits(SALT_HEX, 8).to_string();
    assert_eq!(verify(&token, &eight).map(|s| s.bits), Ok(8));
}

#[test]
fn signed_bits_that_disagree_with_the_difficulty_are_bad_payload() {
    for (difficulty, bits) in [(4, 18), (5, 21), (1, 0), (12, 49)] {
        let json = format!(
            r#"{{"ip":"{IP}","ts":{NOW},"difficulty":{difficulty},"salt":"{SALT_HEX}","bits":{bits}}}"#
        );
        assert_eq!(
            verify(&signed_json(&json), "1"),
            Err(Rejection::BadPayload),
            "{json}"
        );
    }
}

// Order: the first failing row wins.

#[test]
fn checks_run_in_spec_order() {
    let stale_elsewhere =
        issue_challenge_with_salt(&keys(), "198.51.100.1", NOW - TTL - 1, TTL, 2, SALT);
    // Wrong IP, expired and wrong nonce at once: the IP row answers.
    assert_eq!(verify(&stale_elsewhere.token, "x"), Err(Rejection::WrongIp));
    let stale = issue_challenge_with_salt(&keys(), IP, NOW - TTL - 1, TTL, 2, SALT);
    assert_eq!(verify(&stale.token, "x"), Err(Rejection::Expired));
    // A malformed token wins over a missing signature check.
    assert_eq!(verify("garbage", "x"), Err(Rejection::Malformed));
}

// The table of outcomes itself.

#[test]
fn rejections_map_to_the_spec_table() {
    let table = [
        (
            Rejection::Malformed,
            400,
            "Malformed challenge token",
            "malformed",
            false,
        ),
        (
            Rejection::BadSignature,
            403,
            "Invalid challenge signature",
            "signature",
            false,
        ),
        (
            Rejection::BadPayload,
            400,
            "Invalid payload encoding",
            "payload",
            false,
        ),
        (
            Rejection::WrongIp,
            403,
            "Challenge was not issued for this IP",
            "ip",
            false,
        ),
        (
            Rejection::Expired,
            410,
            "Challenge expired",
            "expired",
            true,
        ),
        (
            Rejection::WrongSolution,
            422,
            "Incorrect PoW solution",
            "solution",
            true,
        ),
    ];
    for (rejection, status, message, reason, fresh) in table {
        assert_eq!(rejection.status(), status);
        assert_eq!(rejection.message(), message);
        assert_eq!(rejection.reason(), reason);
        assert_eq!(rejection.wants_fresh_challenge(), fresh);
    }
}

#[test]
fn spent_is_409_challenge_already_spent() {
    assert_eq!(SPENT_STATUS, 409);
    assert_eq!(SPENT_MESSAGE, "Challenge already spent");
}

//! Tokens with every signed field (docs/protocol.md §4): `ip`, `ts`,
//! `difficulty`, `salt` and the optional `exp`, `gen`, `bits`, `pol`, `ck`
//! and `st`, each present or not, as a number or as something else (a
//! string, a negative or fractional number, null, a boolean), signed with
//! the verifier's key, through `verify_bound` (with and without a binding
//! to check) and `read_unverified`. A token is accepted only as §6 says:
//! for this address, client key and policy, unexpired, at no less than its
//! price, the location's and (for a token without `pol`) the location's
//! highest; and what verification reports is what the token says.
//!
//! Input: `flags` (2 bytes: which fields are there), `reprs` (2 bytes: two
//! bits per optional field, 0 a number), `min`, then the values, read as
//! needed (zeros once the input runs out). The nonce is solved when the
//! price is 10 bits or less, else read from the input.
#![no_main]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use libfuzzer_sys::fuzz_target;
use pow_shield_protocol::{
    self as pow, client_id, read_unverified, Binding, Expected, Secret, SecretKeys, Work,
    FUTURE_SKEW_MS, MAX_BITS, MIN_BITS,
};
use sha2::Sha256;

const KEY: [u8; 32] = [b'k'; 32];
const CLIENT_IP: &str = "203.0.113.19";
const CLIENT_KEY: &[u8] = b"203.0.113.19";
const POLICY: u64 = 0x1f_2e3d_4c5b_6a79;
/// 2024-04-01.
const NOW_MS: u64 = 1_711_929_570_000;
const TTL_MS: u64 = 60_000;
const SALT: &str = "6c17a261001047c8b3e83591c3269c2e";

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }

    fn u64(&mut self, bytes: usize) -> u64 {
        (0..bytes).fold(0, |n, _| (n << 8) | u64::from(self.byte()))
    }
}

/// One optional field: its value if written as a number.
struct Field {
    name: &'static str,
    number: Option<u64>,
}

fn sign(json: &[u8]) -> String {
    let mut token = URL_SAFE_NO_PAD.encode(json);
    // ok: HMAC takes a key of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(&KEY).expect("any key length");
    mac.update(token.as_bytes());
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(mac.finalize().into_bytes(), &mut token);
    token
}

/// Writes `"name":value` in the representation `repr` chose; the value
/// as a number only for repr 0.
fn write(json: &mut String, name: &str, value: u64, repr: u8) -> Option<u64> {
    let text = match repr & 3 {
        0 => value.to_string(),
        1 => format!("\"{value}\""),
        2 => match value % 4 {
            0 => "-1".to_owned(),
            1 => format!("{value}.5"),
            2 => "null".to_owned(),
            _ => "true".to_owned(),
        },
        _ => format!("{value}e3"),
    };
    json.push_str(&format!(",\"{name}\":{text}"));
    (repr & 3 == 0).then_some(value)
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let flags = input.u64(2);
    let reprs = input.u64(2);
    let min_bits = MIN_BITS + input.byte() % MAX_BITS;
    let has = |bit: u32| flags & (1 << bit) != 0;
    let repr = |i: u32| ((reprs >> (2 * i)) & 3) as u8;

    let ip = if has(0) { CLIENT_IP } else { "198.51.100.1" };
    // Around now: up to 2 minutes either way, so past, present and future.
    let ts = NOW_MS - 120_000 + input.u64(3) % 240_000;
    let bits_value = u64::from(input.byte() % 52);
    let difficulty = if has(1) {
        bits_value.div_ceil(4)
    } else {
        u64::from(input.byte() % 14)
    };
    let salt = if has(2) {
        SALT.to_owned()
    } else {
        let n = usize::from(input.byte() % 40);
        (0..n).map(|_| char::from(b"0123456789abcdefXY"[usize::from(input.byte() % 18)])).collect()
    };
    let mut json = format!("{{\"ip\":\"{ip}\",\"ts\":{ts},\"difficulty\":{difficulty},\"salt\":\"{salt}\"");

    let exp = ts + input.u64(3) % 200_000;
    let gen = input.u64(8);
    let pol = if has(3) { POLICY } else { input.u64(7) };
    let ck = if has(4) { client_id(CLIENT_KEY) } else { input.u64(7) };
    let st = u64::from(input.byte() % 3);
    let mut fields = Vec::new();
    for (i, (name, value)) in [
        ("exp", exp),
        ("gen", gen),
        ("bits", bits_value),
        ("pol", pol),
        ("ck", ck),
        ("st", st),
    ]
    .into_iter()
    .enumerate()
    {
        let number = if has(5 + i as u32) {
            write(&mut json, name, value, repr(i as u32))
        } else {
            None
        };
        // Absent, or not a number: verification fails or ignores it alike.
        fields.push(Field { name, number });
    }
    if has(11) {
        json.push_str(",\"later\":[1,{\"x\":2}]");
    }
    json.push('}');
    // null reads as absent; anything else that is no number, as no token
    let field = |name: &str| fields.iter().find(|f| f.name == name).and_then(|f| f.number);

    let token = sign(json.as_bytes());
    let max_bits = 1 + input.byte() % MAX_BITS;
    let expected = Expected {
        binding: Binding {
            policy: POLICY,
            client: client_id(CLIENT_KEY),
            work: Work::Sha256,
        },
        max_bits,
    };
    let bound = has(12).then_some(&expected);

    let token_bits = field("bits").unwrap_or(difficulty.saturating_mul(4));
    let mut price = u64::from(min_bits).max(token_bits);
    if bound.is_some() && field("pol").is_none() {
        price = price.max(u64::from(max_bits));
    }
    let nonce = if price <= 10 && salt.len() >= 32 {
        pow::solve_bits(&salt, u8::try_from(price).unwrap_or(48)).to_string()
    } else {
        input.u64(8).to_string()
    };

    let keys = SecretKeys::single(Secret::new(&KEY).expect("32-byte key"));
    let result = pow::verify_bound(
        &keys,
        Some(token.as_bytes()),
        Some(nonce.as_bytes()),
        CLIENT_IP,
        min_bits,
        NOW_MS,
        TTL_MS,
        bound,
    );
    let info = read_unverified(&token);
    match result {
        Ok(solved) => {
            let info = info.as_ref().expect("a verified token reads");
            assert_eq!(ip, CLIENT_IP, "accepted for another address");
            assert!(solved.bits >= min_bits, "below the location's price");
            assert!(u64::from(solved.bits) >= token_bits, "below the token's price");
            assert!(pow::meets_bits(salt.as_bytes(), nonce.as_bytes(), solved.bits));
            if let Some(expected) = bound {
                match field("pol") {
                    Some(pol) => assert_eq!(pol, expected.binding.policy, "another policy"),
                    None => assert!(solved.bits >= expected.max_bits, "unbound below the highest price"),
                }
                if let Some(ck) = field("ck") {
                    assert_eq!(ck, expected.binding.client, "another client");
                }
            }
            assert_eq!(solved.issued_at_ms, ts);
            assert_eq!(solved.expires_at_ms, field("exp"));
            assert!(NOW_MS <= field("exp").unwrap_or(ts + TTL_MS), "expired");
            assert!(ts <= NOW_MS + FUTURE_SKEW_MS, "from the future");
            assert_eq!(solved.generation, field("gen"));
            assert_eq!(solved.struck, field("st") != Some(0));
            assert_eq!(u64::from(info.bits), token_bits);
        }
        Err(rejection) => {
            assert!([400, 403, 409, 410, 422].contains(&rejection.status()));
            assert!(!rejection.message().is_empty());
        }
    }
    if let Some(info) = info {
        assert!((MIN_BITS..=MAX_BITS).contains(&info.bits));
        assert_eq!(info.difficulty, info.bits.div_ceil(4));
        assert_eq!(u64::from(info.difficulty), difficulty);
        assert_eq!(info.ip, ip);
        assert_eq!(info.issued_at_ms, ts);
        assert_eq!(info.expires_at_ms, field("exp"));
        assert_eq!(info.salt, salt);
    }
});

//! Test vectors: the Ed25519 examples of draft-meunier-web-bot-auth-architecture
//! (its v1 and v2 test data, as Cloudflare's implementation ships them) and
//! the `web-bot-auth` crate's own vector, all signed with RFC 9421 B.1.4's
//! test key. Each verifies at its own time and stays anonymous when
//! anything is changed; our signer makes the very same bytes.

use pow_shield_bots::message::Fixed;
use pow_shield_bots::verify::verify_with;
use pow_shield_bots::{verify, Anonymous, KeySet, Params, Registry, SigningKey};

/// RFC 9421 B.1.4 (`test-key-ed25519`).
const D: &str = "n4Ni-HpISpVObnQMW0wOhCKROaIKqKtW_2ZYb2p9KcU";
const X: &str = "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs";
const KEYID: &str = "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";
const CREATED: i64 = 1_735_689_600;

struct Vector {
    name: &'static str,
    signature_input: &'static str,
    signature: &'static str,
    signature_agent: Option<&'static str>,
    nonce: &'static str,
    expires: i64,
}

const VECTORS: &[Vector] = &[
    Vector {
        name: "draft v1, @authority",
        signature_input: r#"sig1=("@authority");created=1735689600;keyid="poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";alg="ed25519";expires=1735693200;nonce="mYotfW3CUjI68sbGw6oKd7kyXqPjZEtU8xFPGWFrqOAf5qC6MDe3pys3SWWCudB0MvwslHy32WXUpkR7u0lt/w==";tag="web-bot-auth""#,
        signature: "sig1=:+NA/cssf4Y2bQTMTkyvTGRCaVzp9quyUevdwwMtMOWhhOOZ2T1subBj0BtvdnrpDEuwSAbiTeElXDzHL3WWKCw==:",
        signature_agent: None,
        nonce: "mYotfW3CUjI68sbGw6oKd7kyXqPjZEtU8xFPGWFrqOAf5qC6MDe3pys3SWWCudB0MvwslHy32WXUpkR7u0lt/w==",
        expires: 1_735_693_200,
    },
    Vector {
        name: "draft v1, @authority and signature-agent",
        signature_input: r#"sig2=("@authority" "signature-agent");created=1735689600;keyid="poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";alg="ed25519";expires=1735693200;nonce="e8N7S2MFd/qrd6T2R3tdfAuuANngKI7LFtKYI/vowzk4lAZYadIX6wW25MwG7DCT9RUKAJ0qVkU0mEeLElW1qg==";tag="web-bot-auth""#,
        signature: "sig2=:jdq0SqOwHdyHr9+r5jw3iYZH6aNGKijYp/EstF4RQTQdi5N5YYKrD+mCT1HA1nZDsi6nJKuHxUi/5Syp3rLWBA==:",
        signature_agent: Some(r#""https://signature-agent.test""#),
        nonce: "e8N7S2MFd/qrd6T2R3tdfAuuANngKI7LFtKYI/vowzk4lAZYadIX6wW25MwG7DCT9RUKAJ0qVkU0mEeLElW1qg==",
        expires: 1_735_693_200,
    },
    Vector {
        name: "draft v2, @authority",
        signature_input: r#"sig1=("@authority");created=1735689600;keyid="poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";alg="ed25519";expires=4889289600;nonce="zIW8+cdmA3vdYagbxojpONwa/l0EKJ/O3/wD486VvsQjO/RxPaSt6ZxvQaMcQzNnqKN/mQ6hpGiFro2L2qkz5A==";tag="web-bot-auth""#,
        signature: "sig1=:QKN4fTdIYfh82fvoZCQiQA1weuozfCS/Led2zTMbewMMqH8PI2Wsy/5c4ao6B6D09nraNQdBNOADg8aM1MqfCg==:",
        signature_agent: None,
        nonce: "zIW8+cdmA3vdYagbxojpONwa/l0EKJ/O3/wD486VvsQjO/RxPaSt6ZxvQaMcQzNnqKN/mQ6hpGiFro2L2qkz5A==",
        expires: 4_889_289_600,
    },
    Vector {
        name: "draft v2, signature-agent as a Dictionary member",
        signature_input: r#"sig2=("@authority" "signature-agent";key="agent2");created=1735689600;keyid="poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";alg="ed25519";expires=4889289600;nonce="n9p433xm+NJ3ph3upfBIGmsuwHw387YV7Q/F+6BSpGCVjYCqQw6rznNA8PVVLySrAWsv0hQtFioQb6E1YsauiA==";tag="web-bot-auth""#,
        signature: "sig2=:RdNFx5Bj6au3YgAMQL/RzmUlZE8QZLIaXGRpw985hWnwPfMxT228NMk6ehRS1PSl4e8PhbNZACSanGdhEwYCCg==:",
        signature_agent: Some(r#"agent2="https://signature-agent.test""#),
        nonce: "n9p433xm+NJ3ph3upfBIGmsuwHw387YV7Q/F+6BSpGCVjYCqQw6rznNA8PVVLySrAWsv0hQtFioQb6E1YsauiA==",
        expires: 4_889_289_600,
    },
    Vector {
        name: "web-bot-auth crate",
        signature_input: r#"sig1=("@authority");created=1735689600;keyid="poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";alg="ed25519";expires=1735693200;nonce="gubxywVx7hzbYKatLgzuKDllDAIXAkz41PydU7aOY7vT+Mb3GJNxW0qD4zJ+IOQ1NVtg+BNbTCRUMt1Ojr5BgA==";tag="web-bot-auth""#,
        signature: "sig1=:uz2SAv+VIemw+Oo890bhYh6Xf5qZdLUgv6/PbiQfCFXcX/vt1A8Pf7OcgL2yUDUYXFtffNpkEr5W6dldqFrkDg==:",
        signature_agent: None,
        nonce: "gubxywVx7hzbYKatLgzuKDllDAIXAkz41PydU7aOY7vT+Mb3GJNxW0qD4zJ+IOQ1NVtg+BNbTCRUMt1Ojr5BgA==",
        expires: 1_735_693_200,
    },
];

fn registry() -> Registry {
    let set = format!(
        r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","kid":"test-key-ed25519","x":"{X}"}}]}}"#
    );
    let mut r = Registry::default();
    r.add("examplebot", &KeySet::parse(&set).unwrap()).unwrap();
    r
}

fn request(v: &Vector, authority: &str, input: &str, signature: &str) -> Fixed {
    let mut fields = vec![("Signature-Input", input), ("Signature", signature)];
    if let Some(agent) = v.signature_agent {
        fields.push(("Signature-Agent", agent));
    }
    Fixed::get(authority, &fields)
}

#[test]
fn every_vector_verifies_as_the_bot_of_its_key() {
    let r = registry();
    for v in VECTORS {
        let m = request(v, "example.com", v.signature_input, v.signature);
        let got = verify_with(&m, &r, CREATED + 10, i64::MAX)
            .unwrap_or_else(|e| panic!("{}: {e:?}", v.name));
        assert_eq!(r.names()[got.bot], "examplebot", "{}", v.name);
        assert_eq!(
            (got.keyid.as_str(), got.nonce.as_str()),
            (KEYID, v.nonce),
            "{}",
            v.name
        );
        assert_eq!(got.expires, v.expires, "{}", v.name);
        // The v2 examples claim a century: more than the hour allowed.
        let within = v.expires - CREATED <= 3600;
        assert_eq!(verify(&m, &r, CREATED + 10).is_ok(), within, "{}", v.name);
        if !within {
            assert_eq!(verify(&m, &r, CREATED + 10), Err(Anonymous::TooLong));
        }
    }
}

#[test]
fn the_signature_is_good_from_5_s_before_created_to_5_s_after_expires() {
    let r = registry();
    let v = &VECTORS[0];
    let m = request(v, "example.com", v.signature_input, v.signature);
    assert!(verify(&m, &r, CREATED - 5).is_ok());
    assert_eq!(verify(&m, &r, CREATED - 6), Err(Anonymous::NotYetValid));
    assert!(verify(&m, &r, v.expires + 4).is_ok());
    assert_eq!(verify(&m, &r, v.expires + 5), Err(Anonymous::Expired));
}

#[test]
fn another_authority_a_changed_byte_or_another_key_stay_anonymous() {
    let r = registry();
    let verify = |m: &Fixed, r: &Registry, now| verify_with(m, r, now, i64::MAX);
    for v in VECTORS {
        let other = request(v, "other.example", v.signature_input, v.signature);
        assert_eq!(
            verify(&other, &r, CREATED),
            Err(Anonymous::BadSignature(0)),
            "{}",
            v.name
        );
        // One base64 digit of the signature changed.
        let mut tampered = v.signature.to_owned().into_bytes();
        tampered[10] = if tampered[10] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).unwrap();
        let m = request(v, "example.com", v.signature_input, &tampered);
        assert_eq!(
            verify(&m, &r, CREATED),
            Err(Anonymous::BadSignature(0)),
            "{}",
            v.name
        );
        let later = v
            .signature_input
            .replace("created=1735689600", "created=1735689601");
        let m = request(v, "example.com", &later, v.signature);
        assert_eq!(
            verify(&m, &r, CREATED),
            Err(Anonymous::BadSignature(0)),
            "{}",
            v.name
        );
        if let Some(agent) = v.signature_agent {
            let moved = agent.replace("signature-agent.test", "elsewhere.test");
            let mut m = request(v, "example.com", v.signature_input, v.signature);
            m.fields.retain(|(k, _)| k != "signature-agent");
            m.fields.push(("signature-agent".into(), moved));
            assert_eq!(
                verify(&m, &r, CREATED),
                Err(Anonymous::BadSignature(0)),
                "{}",
                v.name
            );
        }
    }
    let stranger = SigningKey::generate().unwrap();
    let mut r2 = Registry::default();
    r2.add("other", &KeySet::parse(&stranger.directory()).unwrap())
        .unwrap();
    let v = &VECTORS[0];
    let m = request(v, "example.com", v.signature_input, v.signature);
    assert_eq!(verify(&m, &r2, CREATED), Err(Anonymous::UnknownKey));
}

#[test]
fn what_is_not_web_bot_auth_stays_anonymous() {
    let r = registry();
    let v = &VECTORS[0];
    let unsigned = Fixed::get("example.com", &[]);
    assert_eq!(verify(&unsigned, &r, CREATED), Err(Anonymous::Unsigned));
    for (input, why) in [
        (v.signature_input.replace("web-bot-auth", "other"), Anonymous::Malformed),
        ("sig1=garbage((".to_owned(), Anonymous::Malformed),
        (v.signature_input.replace(";nonce=\"mYotfW3CUjI68sbGw6oKd7kyXqPjZEtU8xFPGWFrqOAf5qC6MDe3pys3SWWCudB0MvwslHy32WXUpkR7u0lt/w==\"", ""), Anonymous::NoNonce),
        (v.signature_input.replace("expires=1735693200", "expires=1735776001"), Anonymous::TooLong),
        (v.signature_input.replace("\"@authority\"", "\"@target-uri\""), Anonymous::NoAuthority),
        (v.signature_input.replace("alg=\"ed25519\"", "alg=\"rsa-pss-sha512\""), Anonymous::UnknownKey),
    ] {
        let m = request(v, "example.com", &input, v.signature);
        assert_eq!(verify(&m, &r, CREATED), Err(why), "{input}");
    }
    // An unsigned Signature-Agent makes the signature invalid.
    let m = Fixed::get(
        "example.com",
        &[
            ("Signature-Input", v.signature_input),
            ("Signature", v.signature),
            ("Signature-Agent", "\"https://x.test\""),
        ],
    );
    assert_eq!(verify(&m, &r, CREATED), Err(Anonymous::Malformed));
}

#[test]
fn our_signer_makes_the_vectors_bytes() {
    let key = SigningKey::from_jwk(&format!(
        r#"{{"kty":"OKP","crv":"Ed25519","d":"{D}","x":"{X}"}}"#
    ))
    .unwrap();
    assert_eq!(key.thumbprint(), KEYID);
    for v in VECTORS.iter().filter(|v| v.signature_agent.is_none()) {
        let signed = key
            .sign_as(
                "sig1",
                &Params {
                    authority: "example.com",
                    signature_agent: None,
                    created: CREATED,
                    expires: v.expires,
                    nonce: v.nonce,
                },
            )
            .unwrap();
        assert_eq!(signed.signature_input, v.signature_input, "{}", v.name);
        assert_eq!(signed.signature, v.signature, "{}", v.name);
    }
}

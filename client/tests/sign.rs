//! Signing as a known bot (Web Bot Auth): the blocking client and the
//! reqwest middleware sign every try, or, with a signer `when_asked`, send
//! a request again signed once its answer asks (`Accept-Signature`), and
//! sign that origin's later requests from the start.

mod support;

use std::time::{SystemTime, UNIX_EPOCH};

use pow_shield_bots::accept::INVITATION;
use pow_shield_bots::message::Fixed;
use pow_shield_bots::{verify, KeySet, Registry};
use pow_shield_client::blocking::{Client, Request};
use pow_shield_client::{BotSigner, Policy, SigningKey};
use support::*;

/// A signer of a new key, and a registry that knows it.
fn bot() -> (SigningKey, Registry) {
    let key = SigningKey::generate().unwrap();
    let mut registry = Registry::default();
    registry
        .add("mybot", &KeySet::parse(&key.directory()).unwrap())
        .unwrap();
    (key, registry)
}

/// The signature's nonce when the request verifies as the bot's.
fn verified(seen: &Seen, authority: &str, registry: &Registry) -> Option<String> {
    let fields: Vec<(&str, &str)> = seen
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    verify(&Fixed::get(authority, &fields), registry, now)
        .ok()
        .map(|v| v.nonce)
}

fn authority(url: &str) -> String {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}

/// A 429 challenge that invites a signature.
fn invited(salt_byte: u8) -> (Answer, String) {
    let (c, token) = challenge("429 Too Many Requests", 2, salt_byte);
    let Answer::Raw(text) = c else { unreachable!() };
    let text = text.replacen(
        "\r\n",
        &format!("\r\nAccept-Signature: {INVITATION}\r\n"),
        1,
    );
    (Answer::Raw(text), token)
}

fn get(url: &str) -> Request {
    Request {
        method: "GET".into(),
        url: url.into(),
        ..Request::default()
    }
}

#[test]
fn a_key_signs_every_try_afresh_and_an_invitation_changes_nothing() {
    let (key, registry) = bot();
    let (c, token) = invited(41);
    let fake = serve(vec![c, ok("items")]);
    let client = Client::new(Policy::default()).sign_with(BotSigner::new(key));
    let reply = client.send(&get(&fake.url), &mut |_| {}).unwrap();
    assert_eq!(reply.status, 200);
    let seen = fake.requests();
    let at = authority(&fake.url);
    let first = verified(&seen[0], &at, &registry).expect("the first try is signed");
    let second = verified(&seen[1], &at, &registry).expect("the paid try is signed");
    assert_ne!(first, second, "a fresh nonce each try");
    assert!(paid(&seen[1], &token), "signed already: the 429 is paid");
}

#[test]
fn a_signer_when_asked_resends_once_signed_then_signs_the_origin_from_the_start() {
    let (key, registry) = bot();
    let (c, _) = invited(42);
    let fake = serve(vec![c, ok("signed"), ok("again")]);
    let client = Client::new(Policy::default()).sign_with(BotSigner::new(key).when_asked());
    let at = authority(&fake.url);
    assert_eq!(
        client.send(&get(&fake.url), &mut |_| {}).unwrap().status,
        200
    );
    assert_eq!(
        client.send(&get(&fake.url), &mut |_| {}).unwrap().status,
        200
    );
    let seen = fake.requests();
    assert!(verified(&seen[0], &at, &registry).is_none() && seen[0].header("Signature").is_none());
    assert!(
        verified(&seen[1], &at, &registry).is_some(),
        "sent again, signed"
    );
    assert!(unpaid(&seen[1]), "signing instead of paying");
    assert!(
        verified(&seen[2], &at, &registry).is_some(),
        "the origin is signed from now on"
    );
}

#[test]
fn a_signer_when_asked_pays_a_429_that_does_not_ask() {
    let (key, _) = bot();
    let (c, token) = challenge("429 Too Many Requests", 2, 43);
    let fake = serve(vec![c, ok("items")]);
    let client = Client::new(Policy::default()).sign_with(BotSigner::new(key).when_asked());
    assert_eq!(
        client.send(&get(&fake.url), &mut |_| {}).unwrap().status,
        200
    );
    let seen = fake.requests();
    assert!(seen.iter().all(|s| s.header("Signature-Input").is_none()));
    assert!(paid(&seen[1], &token));
}

#[cfg(feature = "reqwest")]
mod middleware {
    use super::*;
    use pow_shield_client::middleware::PowShield;
    use reqwest_middleware::ClientBuilder;

    #[tokio::test]
    async fn the_middleware_signs_every_try_afresh() {
        let (key, registry) = bot();
        let (c, token) = challenge("429 Too Many Requests", 2, 44);
        let fake = serve(vec![c, ok("items")]);
        let client = ClientBuilder::new(reqwest::Client::new())
            .with(PowShield::default().sign_with(BotSigner::new(key)))
            .build();
        let response = client.get(&fake.url).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let seen = fake.requests();
        let at = authority(&fake.url);
        let first = verified(&seen[0], &at, &registry).expect("signed");
        let second = verified(&seen[1], &at, &registry).expect("signed");
        assert_ne!(first, second);
        assert!(paid(&seen[1], &token));
    }

    #[tokio::test]
    async fn the_middleware_when_asked_resends_once_signed() {
        let (key, registry) = bot();
        let (c, _) = invited(45);
        let fake = serve(vec![c, ok("signed"), ok("again")]);
        let client = ClientBuilder::new(reqwest::Client::new())
            .with(PowShield::default().sign_with(BotSigner::new(key).when_asked()))
            .build();
        assert_eq!(client.get(&fake.url).send().await.unwrap().status(), 200);
        assert_eq!(client.get(&fake.url).send().await.unwrap().status(), 200);
        let seen = fake.requests();
        let at = authority(&fake.url);
        assert!(seen[0].header("Signature-Input").is_none());
        assert!(verified(&seen[1], &at, &registry).is_some());
        assert!(unpaid(&seen[1]));
        assert!(verified(&seen[2], &at, &registry).is_some());
    }
}

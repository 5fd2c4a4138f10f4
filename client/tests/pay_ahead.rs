//! Paying ahead (SPEC §4) and pacing against a scripted server: the
//! blocking client, and the reqwest middleware (feature `reqwest`).

mod support;

use std::io::Read;
use std::sync::Arc;

use pow_shield_client::ahead::Ahead;
use pow_shield_client::blocking::{Client, Event, Request};
use pow_shield_client::Policy;
use support::*;

fn get(url: &str) -> Request {
    Request {
        method: "GET".into(),
        url: url.into(),
        ..Request::default()
    }
}

/// Sends `count` GETs to `url` in a row through `client`; each status,
/// and how many times the client paced.
fn send_all(client: &Client, url: &str, count: usize) -> (Vec<u16>, usize) {
    let mut paced = 0;
    let mut statuses = Vec::new();
    for _ in 0..count {
        let mut events = |e: Event| paced += usize::from(matches!(e, Event::Pacing(_)));
        let mut reply = client.send(&get(url), &mut events).unwrap();
        let mut body = String::new();
        reply.body.read_to_string(&mut body).unwrap();
        statuses.push(reply.status);
    }
    (statuses, paced)
}

#[test]
fn the_next_challenge_is_paid_with_the_next_request_in_one_round_trip() {
    let (t1, t2) = (next_token(2, 1), next_token(2, 2));
    let fake = serve(vec![
        ok_ahead("free", Some(&t1), &[("X-RateLimit-Remaining", "0")]),
        ok_ahead("paid", Some(&t2), &[]),
        ok_ahead("paid", None, &[]),
    ]);
    let (statuses, _) = send_all(&Client::new(Policy::default()), &fake.url, 3);
    assert_eq!(statuses, [200, 200, 200]);
    let seen = fake.requests();
    assert_eq!(seen.len(), 3, "one round trip per request");
    assert!(unpaid(&seen[0]));
    assert!(paid(&seen[1], &t1));
    assert!(paid(&seen[2], &t2));
}

#[test]
fn a_solution_ahead_is_sent_once() {
    let t1 = next_token(2, 3);
    let fake = serve(vec![
        ok_ahead("free", Some(&t1), &[]),
        ok_ahead("paid", None, &[]),
        ok_ahead("free again", None, &[]),
    ]);
    send_all(&Client::new(Policy::default()), &fake.url, 3);
    let seen = fake.requests();
    assert!(paid(&seen[1], &t1));
    assert!(unpaid(&seen[2]));
}

#[test]
fn a_solution_ahead_refused_with_403_falls_back_to_the_429_path() {
    let t1 = next_token(2, 4);
    let (c, t2) = challenge("429 Too Many Requests", 2, 5);
    let refusal = plain(
        "403 Forbidden",
        &[("Content-Type", "application/json")],
        r#"{"error":"Challenge was not issued for this IP"}"#,
    );
    let fake = serve(vec![
        ok_ahead("free", Some(&t1), &[]),
        refusal,
        c,
        ok("paid"),
    ]);
    let (statuses, _) = send_all(&Client::new(Policy::default()), &fake.url, 2);
    assert_eq!(statuses, [200, 200]);
    let seen = fake.requests();
    assert!(paid(&seen[1], &t1));
    assert!(unpaid(&seen[2]), "sent again without the refused solution");
    assert!(paid(&seen[3], &t2));
}

#[test]
fn an_application_403_to_a_paid_request_is_the_answer() {
    let (t1, t2) = (next_token(2, 6), next_token(2, 7));
    let forbidden = plain(
        "403 Forbidden",
        &[
            ("Content-Type", "text/plain"),
            ("X-PoW-Next-Challenge", &t2),
        ],
        "not yours",
    );
    let fake = serve(vec![ok_ahead("free", Some(&t1), &[]), forbidden]);
    let (statuses, _) = send_all(&Client::new(Policy::default()), &fake.url, 2);
    assert_eq!(statuses, [200, 403]);
    assert_eq!(fake.requests().len(), 2);
}

#[test]
fn an_application_json_400_to_a_paid_request_is_the_answer_never_resent() {
    let t1 = next_token(2, 9);
    let invalid = plain(
        "400 Bad Request",
        &[("Content-Type", "application/json")],
        r#"{"error":"name is required"}"#,
    );
    let fake = serve(vec![ok_ahead("free", Some(&t1), &[]), invalid, ok("twice")]);
    let (statuses, _) = send_all(&Client::new(Policy::default()), &fake.url, 2);
    assert_eq!(statuses, [200, 400]);
    assert_eq!(fake.requests().len(), 2, "sent once");
}

#[test]
fn a_callers_own_solution_is_sent_instead_of_one_ahead() {
    let t1 = next_token(2, 8);
    let fake = serve(vec![ok_ahead("free", Some(&t1), &[]), ok("paid")]);
    let client = Client::new(Policy::default());
    send_all(&client, &fake.url, 1);
    let mut req = get(&fake.url);
    req.headers = vec![
        ("X-PoW-Challenge".into(), "own.token".into()),
        ("X-PoW-Nonce".into(), "1".into()),
    ];
    client.send(&req, &mut |_| {}).unwrap();
    let seen = fake.requests();
    assert_eq!(seen[1].header("X-PoW-Challenge"), Some("own.token"));
    assert_eq!(
        client.ahead().held(&fake.url),
        1,
        "kept for the next request"
    );
}

#[test]
fn without_pay_ahead_the_next_challenge_is_ignored() {
    let t1 = next_token(2, 9);
    let fake = serve(vec![ok_ahead("free", Some(&t1), &[]), ok("free")]);
    let policy = Policy {
        pay_ahead: false,
        ..Policy::default()
    };
    send_all(&Client::new(policy), &fake.url, 2);
    assert!(unpaid(&fake.requests()[1]));
}

#[test]
fn clients_sharing_an_ahead_share_its_solutions() {
    let t1 = next_token(2, 10);
    let fake = serve(vec![ok_ahead("free", Some(&t1), &[]), ok("paid")]);
    let ahead = Arc::new(Ahead::new());
    let first = Client::new(Policy::default()).with_ahead(Arc::clone(&ahead));
    let second = Client::new(Policy::default()).with_ahead(ahead);
    send_all(&first, &fake.url, 1);
    send_all(&second, &fake.url, 1);
    assert!(paid(&fake.requests()[1], &t1));
}

#[test]
fn pacing_waits_for_the_reset_instead_of_paying() {
    let t1 = next_token(2, 11);
    let spent = [("RateLimit", r#""pow-shield";r=0;t=1"#)];
    let fake = serve(vec![ok_ahead("free", Some(&t1), &spent), ok("free again")]);
    let policy = Policy {
        pace: true,
        ..Policy::default()
    };
    let client = Client::new(policy);
    let (statuses, paced) = send_all(&client, &fake.url, 2);
    assert_eq!((statuses, paced), (vec![200, 200], 1));
    assert!(unpaid(&fake.requests()[1]), "waited, not paid");
    assert_eq!(client.ahead().held(&fake.url), 0, "nothing solved");
}

#[test]
fn after_a_reset_one_request_goes_and_the_others_in_flight_wait_for_its_answer() {
    let spent = [("RateLimit", r#""pow-shield";r=0;t=1"#)];
    let fake = serve((0..4).map(|_| ok_ahead("free", None, &spent)).collect());
    let policy = Policy {
        pace: true,
        ..Policy::default()
    };
    let ahead = Arc::new(Ahead::new());
    let first = Client::new(policy.clone()).with_ahead(Arc::clone(&ahead));
    send_all(&first, &fake.url, 1);
    // Three at once: all sleep to the reset, then one goes; each answer
    // says none is left again, so each of the others sleeps once more per
    // request ahead of it (3 + 2 + 1). Going all at once, they would sleep
    // 3 times in all and two of them would meet the limit.
    let paced: usize = std::thread::scope(|s| {
        let sends: Vec<_> = (0..3)
            .map(|_| {
                let client = Client::new(policy.clone()).with_ahead(Arc::clone(&ahead));
                let url = fake.url.clone();
                s.spawn(move || send_all(&client, &url, 1))
            })
            .collect();
        sends.into_iter().map(|h| h.join().unwrap().1).sum()
    });
    assert_eq!(paced, 6);
    assert_eq!(fake.requests().len(), 4);
}

#[cfg(feature = "reqwest")]
mod middleware {
    use pow_shield_client::middleware::PowShield;
    use pow_shield_client::Policy;
    use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};

    use super::support::*;

    fn client(policy: Policy) -> (ClientWithMiddleware, PowShield) {
        let shield = PowShield::new(policy);
        let client = ClientBuilder::new(reqwest::Client::new())
            .with(shield.clone())
            .build();
        (client, shield)
    }

    async fn statuses(client: &ClientWithMiddleware, url: &str, count: usize) -> Vec<u16> {
        let mut got = Vec::new();
        for _ in 0..count {
            let response = client.get(url).send().await.unwrap();
            got.push(response.status().as_u16());
            response.text().await.unwrap();
        }
        got
    }

    #[tokio::test]
    async fn the_middleware_pays_the_next_challenge_with_the_next_request() {
        let (t1, t2) = (next_token(2, 21), next_token(2, 22));
        let fake = serve(vec![
            ok_ahead("free", Some(&t1), &[]),
            ok_ahead("paid", Some(&t2), &[]),
            ok_ahead("paid", None, &[]),
        ]);
        let (client, _) = client(Policy::default());
        assert_eq!(statuses(&client, &fake.url, 3).await, [200, 200, 200]);
        let seen = fake.requests();
        assert_eq!(seen.len(), 3);
        assert!(unpaid(&seen[0]));
        assert!(paid(&seen[1], &t1));
        assert!(paid(&seen[2], &t2));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_middleware_awaits_a_solution_on_a_single_threaded_runtime() {
        let t1 = next_token(3, 23);
        let fake = serve(vec![ok_ahead("free", Some(&t1), &[]), ok("paid")]);
        let (client, _) = client(Policy::default());
        assert_eq!(statuses(&client, &fake.url, 2).await, [200, 200]);
        assert!(paid(&fake.requests()[1], &t1));
    }

    #[tokio::test]
    async fn a_refused_solution_ahead_falls_back_to_the_429_path() {
        let t1 = next_token(2, 24);
        let (c, t2) = challenge("429 Too Many Requests", 2, 25);
        let refusal = plain(
            "400 Bad Request",
            &[("Content-Type", "application/json")],
            r#"{"error":"Malformed challenge token"}"#,
        );
        let fake = serve(vec![
            ok_ahead("free", Some(&t1), &[]),
            refusal,
            c,
            ok("paid"),
        ]);
        let (client, _) = client(Policy::default());
        assert_eq!(statuses(&client, &fake.url, 2).await, [200, 200]);
        let seen = fake.requests();
        assert!(paid(&seen[1], &t1));
        assert!(unpaid(&seen[2]));
        assert!(paid(&seen[3], &t2));
    }

    #[tokio::test]
    async fn the_middleware_hands_back_an_applications_403_to_a_paid_request() {
        let t1 = next_token(2, 27);
        let forbidden = plain(
            "403 Forbidden",
            &[("Content-Type", "application/json")],
            r#"{"error":"not your order"}"#,
        );
        let fake = serve(vec![
            ok_ahead("free", Some(&t1), &[]),
            forbidden,
            ok("twice"),
        ]);
        let (client, _) = client(Policy::default());
        assert_eq!(statuses(&client, &fake.url, 1).await, [200]);
        let response = client.get(&fake.url).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 403);
        assert_eq!(response.url().as_str(), fake.url.as_str());
        assert_eq!(
            response.text().await.unwrap(),
            r#"{"error":"not your order"}"#
        );
        assert_eq!(fake.requests().len(), 2, "sent once");
    }

    #[tokio::test]
    async fn the_middleware_paces_instead_of_paying() {
        let t1 = next_token(2, 26);
        let spent = [("RateLimit", r#""pow-shield";r=0;t=1"#)];
        let fake = serve(vec![ok_ahead("free", Some(&t1), &spent), ok("free again")]);
        let (client, shield) = client(Policy {
            pace: true,
            ..Policy::default()
        });
        assert_eq!(statuses(&client, &fake.url, 2).await, [200, 200]);
        assert!(unpaid(&fake.requests()[1]));
        assert_eq!(shield.ahead().held(&fake.url), 0);
    }
}

//! The blocking client's retry logic against a scripted server.

mod support;

use std::io::Read;

use pow_shield_client::blocking::{Client, Request};
use pow_shield_client::{Error, Policy, SolveOptions};
use support::*;

fn get(url: &str) -> Request {
    Request {
        method: "GET".into(),
        url: url.into(),
        ..Request::default()
    }
}

fn send(policy: Policy, req: &Request) -> Result<(u16, String), Error> {
    let mut reply = Client::new(policy).send(req, &mut |_| {})?;
    let mut body = String::new();
    reply.body.read_to_string(&mut body).unwrap();
    Ok((reply.status, body))
}

#[test]
fn pays_a_429_and_returns_the_next_answer() {
    let (c, token) = challenge("429 Too Many Requests", 2, 1);
    let fake = serve(vec![c, ok("items")]);
    assert_eq!(
        send(Policy::default(), &get(&fake.url)),
        Ok((200, "items".into()))
    );
    let seen = fake.requests();
    assert_eq!(seen.len(), 2);
    assert!(seen[0].header("X-PoW-Nonce").is_none());
    assert!(paid(&seen[1], &token));
}

#[test]
fn solves_the_fresh_challenge_of_409_410_and_422() {
    for status in ["409 Conflict", "410 Gone", "422 Unprocessable Content"] {
        let (c, token) = challenge(status, 2, 2);
        let fake = serve(vec![c, ok("items")]);
        let mut req = get(&fake.url);
        req.headers = vec![
            ("X-PoW-Challenge".into(), "spent.token".into()),
            ("X-PoW-Nonce".into(), "7".into()),
        ];
        assert_eq!(
            send(Policy::default(), &req),
            Ok((200, "items".into())),
            "{status}"
        );
        let seen = fake.requests();
        assert_eq!(seen[0].header("X-PoW-Challenge"), Some("spent.token"));
        assert!(paid(&seen[1], &token), "{status}");
        assert_eq!(
            seen[1]
                .headers
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case("x-pow-nonce"))
                .count(),
            1
        );
    }
}

#[test]
fn blocked_stops_after_one_request() {
    let fake = serve(vec![blocked("blocked"), ok("never")]);
    assert_eq!(
        send(Policy::default(), &get(&fake.url)),
        Err(Error::Blocked { status: 403 })
    );
    assert_eq!(fake.requests().len(), 1);
}

#[test]
fn banned_stops_after_one_request() {
    let fake = serve(vec![blocked("banned"), ok("never")]);
    assert_eq!(
        send(Policy::default(), &get(&fake.url)),
        Err(Error::Banned { status: 403 })
    );
    assert_eq!(fake.requests().len(), 1);
}

#[test]
fn connection_closed_without_an_answer_is_closed() {
    let fake = serve(vec![Answer::Close]);
    assert_eq!(send(Policy::default(), &get(&fake.url)), Err(Error::Closed));
}

#[test]
fn too_hard_a_challenge_sends_nothing_more() {
    let (c, _) = challenge("429 Too Many Requests", 5, 3);
    let fake = serve(vec![c, ok("never")]);
    let policy = Policy {
        solve: SolveOptions {
            max_difficulty: Some(4),
            ..SolveOptions::default()
        },
        ..Policy::default()
    };
    assert_eq!(
        send(policy, &get(&fake.url)),
        Err(Error::TooHard {
            difficulty: 5,
            max: 4
        })
    );
    assert_eq!(fake.requests().len(), 1);
}

#[test]
fn a_forged_difficulty_12_is_given_up_at_max_solve_time_with_nothing_more_sent() {
    // The client cannot check the MAC: a hostile server's difficulty 12
    // would keep every core busy for months, once per retry.
    let (c, _) = challenge("429 Too Many Requests", 12, 9);
    let fake = serve(vec![c, ok("never")]);
    let policy = one_thread_within(200);
    assert!(matches!(
        send(policy, &get(&fake.url)),
        Err(Error::Timeout { difficulty: 12, .. })
    ));
    assert_eq!(fake.requests().len(), 1);
}

#[test]
fn the_default_policy_gives_up_on_one_challenge_after_30_s() {
    assert_eq!(
        Policy::default().solve.max_solve_time,
        Some(std::time::Duration::from_secs(30))
    );
    assert_eq!(
        Policy::default().solve.max_solve_time,
        Some(pow_shield_client::DEFAULT_MAX_SOLVE_TIME)
    );
}

#[test]
fn gives_up_when_challenged_after_every_retry() {
    let script = (0..3)
        .map(|i| challenge("429 Too Many Requests", 1, i).0)
        .collect();
    let fake = serve(script);
    let policy = Policy {
        max_retries: 2,
        ..Policy::default()
    };
    assert_eq!(
        send(policy, &get(&fake.url)),
        Err(Error::GaveUp { attempts: 2 })
    );
    assert_eq!(fake.requests().len(), 3);
}

#[test]
fn unavailable_with_wait_sleeps_retry_after_then_retries() {
    let unavailable = || {
        plain(
            "503 Service Unavailable",
            &[("Retry-After", "1")],
            r#"{"error":"Rate limiter unavailable"}"#,
        )
    };
    let fake = serve(vec![unavailable(), ok("items")]);
    let policy = Policy {
        prefer_wait: true,
        ..Policy::default()
    };
    assert_eq!(send(policy, &get(&fake.url)), Ok((200, "items".into())));
    assert_eq!(fake.requests().len(), 2);

    let fake = serve(vec![unavailable(), ok("never")]);
    let (status, _) = send(Policy::default(), &get(&fake.url)).unwrap();
    assert_eq!(status, 503);
    assert_eq!(fake.requests().len(), 1);
}

#[test]
fn wait_prefers_sleeping_over_paying_a_429() {
    let (c, _) = challenge("429 Too Many Requests", 2, 4);
    let fake = serve(vec![c, ok("items")]);
    let policy = Policy {
        prefer_wait: true,
        ..Policy::default()
    };
    assert_eq!(send(policy, &get(&fake.url)), Ok((200, "items".into())));
    let seen = fake.requests();
    assert!(seen[1].header("X-PoW-Nonce").is_none());
}

#[test]
fn body_and_headers_are_sent_again_with_the_solution() {
    let (c, token) = challenge("429 Too Many Requests", 2, 5);
    let fake = serve(vec![c, ok("created")]);
    let req = Request {
        method: "POST".into(),
        url: fake.url.clone(),
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: Some(br#"{"name":"x"}"#.to_vec()),
    };
    assert_eq!(send(Policy::default(), &req), Ok((200, "created".into())));
    let seen = fake.requests();
    assert_eq!(seen[1].method, "POST");
    assert_eq!(seen[1].body, br#"{"name":"x"}"#);
    assert_eq!(seen[1].header("Content-Type"), Some("application/json"));
    assert!(paid(&seen[1], &token));
}

#[test]
fn application_statuses_pass_through() {
    let fake = serve(vec![plain("409 Conflict", &[], "taken")]);
    assert_eq!(
        send(Policy::default(), &get(&fake.url)),
        Ok((409, "taken".into()))
    );
}

//! The reqwest middleware against a scripted server.
#![cfg(feature = "reqwest")]

mod support;

use pow_shield_client::middleware::PowShield;
use pow_shield_client::{Error, Policy, SolveOptions};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use support::*;

fn client(policy: Policy) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(PowShield::new(policy))
        .build()
}

fn pow_error(e: reqwest_middleware::Error) -> Error {
    match e {
        reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<Error>().unwrap().clone(),
        other => panic!("not a pow-shield error: {other}"),
    }
}

#[tokio::test]
async fn pays_a_429_transparently() {
    let (c, token) = challenge("429 Too Many Requests", 3, 21);
    let fake = serve(vec![c, ok("items")]);
    let response = client(Policy::default())
        .post(&fake.url)
        .body("payload")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "items");
    let seen = fake.requests();
    assert!(paid(&seen[1], &token));
    assert_eq!(seen[1].body, b"payload");
}

#[tokio::test]
async fn solves_the_fresh_challenge_of_a_409() {
    let (c, token) = challenge("409 Conflict", 2, 22);
    let fake = serve(vec![c, ok("items")]);
    let response = client(Policy::default())
        .get(&fake.url)
        .header("X-PoW-Challenge", "spent.token")
        .header("X-PoW-Nonce", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(paid(&fake.requests()[1], &token));
}

#[tokio::test]
async fn blocked_and_banned_are_typed_errors() {
    for (shield, expected) in [
        ("blocked", Error::Blocked { status: 403 }),
        ("banned", Error::Banned { status: 403 }),
    ] {
        let fake = serve(vec![blocked(shield)]);
        let err = client(Policy::default())
            .get(&fake.url)
            .send()
            .await
            .unwrap_err();
        assert_eq!(pow_error(err), expected);
    }
}

#[tokio::test]
async fn too_hard_is_a_typed_error_and_nothing_more_is_sent() {
    let (c, _) = challenge("429 Too Many Requests", 6, 23);
    let fake = serve(vec![c, ok("never")]);
    let policy = Policy {
        solve: SolveOptions {
            max_difficulty: Some(4),
            ..SolveOptions::default()
        },
        ..Policy::default()
    };
    let err = client(policy).get(&fake.url).send().await.unwrap_err();
    assert_eq!(
        pow_error(err),
        Error::TooHard {
            difficulty: 6,
            max: 4
        }
    );
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn a_forged_difficulty_12_is_given_up_at_max_solve_time() {
    // The client cannot check the MAC: without a bound, a hostile server's
    // difficulty 12 would keep every core busy for months.
    let (c, _) = challenge("429 Too Many Requests", 12, 25);
    let fake = serve(vec![c, ok("never")]);
    let policy = one_thread_within(200);
    let err = client(policy).get(&fake.url).send().await.unwrap_err();
    assert!(matches!(
        pow_error(err),
        Error::Timeout { difficulty: 12, .. }
    ));
    assert_eq!(fake.requests().len(), 1);
}

#[test]
fn the_default_middleware_gives_up_on_one_challenge_after_30_s() {
    let thirty = Some(std::time::Duration::from_secs(30));
    assert_eq!(PowShield::default().policy().solve.max_solve_time, thirty);
    assert_eq!(
        PowShield::new(Policy::default())
            .policy()
            .solve
            .max_solve_time,
        thirty
    );
}

#[tokio::test(flavor = "current_thread")]
async fn solving_does_not_block_the_executor() {
    // One runtime thread: a ticking task only gets to run during the solve
    // if the search is on a blocking thread. The solve cannot succeed
    // (difficulty 12) and ends at --max-solve-time; an inline search would
    // leave the ticker a handful of ticks at most, this one has hundreds.
    let (c, _) = challenge("429 Too Many Requests", 12, 24);
    let fake = serve(vec![c]);
    let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = ticks.clone();
    let ticker = tokio::spawn(async move {
        loop {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    });
    let policy = one_thread_within(500);
    let err = client(policy).get(&fake.url).send().await.unwrap_err();
    assert!(matches!(
        pow_error(err),
        Error::Timeout { difficulty: 12, .. }
    ));
    ticker.abort();
    assert!(ticks.load(std::sync::atomic::Ordering::Relaxed) > 20);
}

#[test]
fn dropping_the_request_stops_its_solve() {
    // One blocking thread: a probe task queued behind the solve runs only
    // once the solve has ended, which a difficulty-12 search on one thread
    // never does by itself.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (c, _) = challenge("429 Too Many Requests", 12, 31);
    let fake = serve(vec![c]);
    let policy = Policy {
        solve: SolveOptions {
            threads: 1,
            ..SolveOptions::default()
        },
        ..Policy::default()
    };
    let request = rt.spawn(client(policy).get(&fake.url).send());
    for _ in 0..600 {
        if !fake.requests().is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(fake.requests().len(), 1, "the challenge was never fetched");
    // Let the middleware reach the solve before dropping the request.
    std::thread::sleep(std::time::Duration::from_millis(300));
    request.abort();
    let probe = rt.spawn_blocking(|| ());
    let (tx, rx) = std::sync::mpsc::channel();
    rt.spawn(async move {
        let _ = tx.send(probe.await.is_ok());
    });
    // Generous: the solver checks its stop flag every ~100 ms.
    let finished = rx.recv_timeout(std::time::Duration::from_secs(60));
    // Dropping a runtime waits for its blocking tasks: not for a stuck solve.
    rt.shutdown_background();
    assert_eq!(finished, Ok(true), "the solve kept running after the drop");
}

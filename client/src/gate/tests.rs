use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::*;

const URL: &str = "http://api.example:8080/items";

#[test]
fn origin_is_scheme_host_and_port_with_the_default_port_spelled_out() {
    assert_eq!(origin("http://API.example/x?y"), "http://api.example:80");
    assert_eq!(origin("https://api.example"), "https://api.example:443");
    assert_eq!(origin("http://u:p@h:8080/a"), "http://h:8080");
    assert_eq!(origin("http://[::1]/"), "http://[::1]:80");
    assert_eq!(origin("http://[::1]:81/"), "http://[::1]:81");
    assert_ne!(origin("http://h/"), origin("https://h/"));
}

#[test]
fn remaining_is_the_lowest_r_of_ratelimit_else_x_ratelimit_remaining() {
    let h = |ietf: Option<&'static str>, x: Option<&'static str>| {
        move |name: &str| match name {
            "RateLimit" => ietf,
            "X-RateLimit-Remaining" => x,
            _ => None,
        }
    };
    assert_eq!(
        remaining(h(Some(r#""pow-shield";r=7;t=3"#), Some("9"))),
        Some(7)
    );
    assert_eq!(
        remaining(h(Some(r#""a";r=7;t=3, "b";r=2;t=1"#), None)),
        Some(2)
    );
    assert_eq!(remaining(h(None, Some(" 3 "))), Some(3));
    assert_eq!(remaining(h(Some("garbage"), Some("x"))), None);
}

#[test]
fn the_gate_starts_at_n_minus_1_in_flight_before_any_answer() {
    let gate = Arc::new(Gate::default());
    let passes: Vec<Pass> = (0..4)
        .map(|_| gate.try_enter(&origin(URL)).unwrap())
        .collect();
    assert!(gate.try_enter(&origin(URL)).is_none(), "a 5th waits");
    assert!(
        gate.try_enter(&origin("http://other.example/")).is_some(),
        "another origin has its own gate"
    );
    drop(passes);
    assert_eq!(gate.in_flight(URL), 0);
}

#[test]
fn remaining_opens_the_gate_and_a_429_or_remaining_0_closes_it() {
    let gate = Arc::new(Gate::default());
    let pass = gate.enter(URL);
    pass.saw(200, Some(30));
    assert_eq!(gate.allowed(URL), 30);
    pass.saw(200, Some(2));
    assert_eq!(gate.allowed(URL), 4, "never below n - 1");
    pass.saw(200, Some(10));
    pass.saw(429, None);
    assert_eq!(gate.allowed(URL), 4);
    pass.saw(200, Some(10));
    pass.saw(200, Some(0));
    assert_eq!(gate.allowed(URL), 4);
}

#[test]
fn an_older_answer_only_closes_the_gate() {
    let gate = Arc::new(Gate::default());
    let old = gate.enter(URL);
    let new = gate.enter(URL);
    new.saw(200, Some(20));
    old.saw(200, Some(50));
    assert_eq!(gate.allowed(URL), 20, "the older answer's 50 is stale");
    old.saw(200, Some(12));
    assert_eq!(gate.allowed(URL), 12, "a lower one applies");
}

#[test]
fn threads_never_have_more_than_the_floor_in_flight() {
    let gate = Arc::new(Gate::default());
    let now = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..50)
        .map(|_| {
            let (gate, now, most) = (Arc::clone(&gate), Arc::clone(&now), Arc::clone(&most));
            thread::spawn(move || {
                let pass = gate.enter(URL);
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(n, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(2));
                pass.saw(429, None);
                now.fetch_sub(1, Ordering::SeqCst);
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(most.load(Ordering::SeqCst), 4);
    assert_eq!(gate.in_flight(URL), 0);
}

#[cfg(feature = "reqwest")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_never_have_more_than_the_floor_in_flight() {
    let gate = Arc::new(Gate::default());
    let now = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (gate, now, most) = (Arc::clone(&gate), Arc::clone(&now), Arc::clone(&most));
            tokio::spawn(async move {
                let pass = gate.enter_async(URL).await;
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                pass.saw(429, None);
                now.fetch_sub(1, Ordering::SeqCst);
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(most.load(Ordering::SeqCst), 4);
}

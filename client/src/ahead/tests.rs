use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pow_shield_protocol::{issue_challenge_bits_with_salt, meets_bits, Secret, SecretKeys};

use super::*;
use crate::SolveOptions;

const URL: &str = "http://api.example:8080/items";

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

/// A next challenge of `bits` issued at `issued_ms`, valid for a minute.
fn token_at(bits: u8, salt: u8, issued_ms: u64) -> String {
    let keys = SecretKeys::single(Secret::new(&[b'k'; 32]).unwrap());
    issue_challenge_bits_with_salt(&keys, "127.0.0.1", issued_ms, 60_000, bits, [salt; 16]).token
}

fn token(bits: u8, salt: u8) -> String {
    token_at(bits, salt, now_ms())
}

fn headers<'a>(list: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> + Copy + 'a {
    move |name| {
        list.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
}

fn one_thread() -> Policy {
    Policy {
        solve: SolveOptions {
            threads: 1,
            ..SolveOptions::default()
        },
        ..Policy::default()
    }
}

/// Offers `token` as the next challenge of a response from `url` and
/// solves it at once on this thread.
fn offered(ahead: &Ahead, url: &str, token: &str, policy: &Policy) {
    let h = [("X-PoW-Next-Challenge", token)];
    ahead.saw(url, headers(&h), policy).expect("a job").run();
}

#[test]
fn the_next_challenge_is_read_from_its_token_and_headers() {
    let t = token(10, 1);
    let next = read_next(headers(&[("X-PoW-Next-Challenge", &t)])).unwrap();
    assert_eq!(next.bits, 10);
    assert_eq!(next.salt, "01".repeat(16));
    assert!(next.expires_at_ms.is_some_and(|exp| exp > now_ms()));
    let asked = [
        ("X-PoW-Next-Challenge", t.as_str()),
        ("X-PoW-Next-Bits", "12"),
    ];
    assert_eq!(read_next(headers(&asked)).unwrap().bits, 12);
    let digits = [
        ("X-PoW-Next-Challenge", t.as_str()),
        ("X-PoW-Next-Difficulty", "4"),
    ];
    assert_eq!(read_next(headers(&digits)).unwrap().bits, 16);
}

#[test]
fn no_usable_next_challenge_is_none() {
    assert_eq!(read_next(headers(&[])), None);
    assert_eq!(
        read_next(headers(&[("X-PoW-Next-Challenge", "garbage")])),
        None
    );
    let t = token(10, 1);
    let injected = format!("{t}\r\nX-Injected: 1");
    assert_eq!(
        read_next(headers(&[("X-PoW-Next-Challenge", &injected)])),
        None
    );
    let beyond = [
        ("X-PoW-Next-Challenge", t.as_str()),
        ("X-PoW-Next-Bits", "49"),
    ];
    assert_eq!(read_next(headers(&beyond)), None);
}

#[test]
fn a_next_challenge_is_solved_and_taken_once_for_its_origin() {
    let ahead = Ahead::new();
    let t = token(8, 2);
    offered(&ahead, URL, &t, &one_thread());
    assert_eq!(ahead.held(URL), 1);
    assert!(
        ahead.take("https://api.example:8080/").is_none(),
        "another origin"
    );
    let (sent, nonce) = ahead
        .take("http://API.example:8080/other")
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(sent, t);
    let salt = "02".repeat(16);
    assert!(meets_bits(
        salt.as_bytes(),
        nonce.nonce.to_string().as_bytes(),
        8
    ));
    assert!(ahead.take(URL).is_none(), "used once");
}

#[test]
fn a_waiter_gets_the_solution_when_the_solver_thread_finishes() {
    let ahead = Ahead::new();
    let t = token(8, 3);
    let h = [("X-PoW-Next-Challenge", t.as_str())];
    let job = ahead.saw(URL, headers(&h), &one_thread()).unwrap();
    let ticket = ahead.take(URL).unwrap();
    job.spawn();
    assert_eq!(ticket.wait().map(|(sent, _)| sent), Some(t));
}

#[test]
fn each_next_challenge_adds_one_solution_to_the_pool() {
    let ahead = Ahead::new();
    let offers: Vec<String> = (0..3).map(|salt| token(4, salt)).collect();
    for t in &offers {
        offered(&ahead, URL, t, &one_thread());
    }
    assert_eq!(ahead.held(URL), 3);
    let sent: Vec<String> = (0..3)
        .map(|_| ahead.take(URL).unwrap().wait().unwrap().0)
        .collect();
    assert_eq!(sent, offers);
    assert_eq!(ahead.held(URL), 0);
}

#[test]
fn the_pool_keeps_the_newest_solutions() {
    let ahead = Ahead::new();
    let offers: Vec<String> = (0..=POOL_SIZE)
        .map(|salt| token(4, u8::try_from(salt).unwrap()))
        .collect();
    for t in &offers {
        offered(&ahead, URL, t, &one_thread());
    }
    assert_eq!(ahead.held(URL), POOL_SIZE);
    let mut sent = Vec::new();
    while let Some(t) = ahead.take(URL) {
        sent.push(t.wait().unwrap().0);
    }
    assert_eq!(sent, offers[1..]);
}

#[test]
fn a_solution_within_the_margin_of_its_exp_is_dropped_unsent() {
    let ahead = Ahead::new();
    // Valid for 1.5 s from its arrival: less than the 2 s margin.
    let keys = SecretKeys::single(Secret::new(&[b'k'; 32]).unwrap());
    let short = issue_challenge_bits_with_salt(&keys, "127.0.0.1", now_ms(), 1_500, 4, [5; 16]);
    offered(&ahead, URL, &short.token, &one_thread());
    assert!(ahead.take(URL).is_none());
    assert_eq!(ahead.held(URL), 0);
}

#[test]
fn a_solutions_life_is_counted_from_its_arrival_not_the_wall_clock() {
    let ahead = Ahead::new();
    // Issued two minutes before this machine's clock, valid for one: the
    // server's clock is behind ours, and its token still good for 60 s.
    offered(
        &ahead,
        URL,
        &token_at(4, 5, now_ms() - 120_000),
        &one_thread(),
    );
    assert!(ahead.take(URL).and_then(Ticket::wait).is_some());
}

#[test]
fn no_job_without_pay_ahead_above_max_difficulty_or_while_pacing_waits() {
    let t = token(12, 6);
    let next = [("X-PoW-Next-Challenge", t.as_str())];
    let ahead = Ahead::new();
    let off = Policy {
        pay_ahead: false,
        ..one_thread()
    };
    assert!(ahead.saw(URL, headers(&next), &off).is_none());
    let capped = Policy {
        solve: SolveOptions {
            max_difficulty: Some(2),
            ..SolveOptions::default()
        },
        ..one_thread()
    };
    assert!(ahead.saw(URL, headers(&next), &capped).is_none());
    let pacing = Policy {
        pace: true,
        ..one_thread()
    };
    let spent = [
        ("X-PoW-Next-Challenge", t.as_str()),
        ("RateLimit", r#""pow-shield";r=0;t=5"#),
    ];
    assert!(ahead.saw(URL, headers(&spent), &pacing).is_none());
    // Pacing pays when the reset is further than max_wait.
    let far = [
        ("X-PoW-Next-Challenge", t.as_str()),
        ("RateLimit", r#""pow-shield";r=0;t=3600"#),
    ];
    assert!(ahead.saw(URL, headers(&far), &pacing).is_some());
    assert_eq!(ahead.held(URL), 1);
}

#[test]
fn a_failed_or_unrun_solve_gives_no_solution() {
    let ahead = Ahead::new();
    let policy = Policy {
        solve: SolveOptions {
            threads: 1,
            max_solve_time: Some(Duration::from_millis(1)),
            ..SolveOptions::default()
        },
        ..Policy::default()
    };
    let hard = token(40, 7);
    let h = [("X-PoW-Next-Challenge", hard.as_str())];
    let job = ahead.saw(URL, headers(&h), &policy).unwrap();
    let ticket = ahead.take(URL).unwrap();
    job.spawn();
    assert_eq!(ticket.wait(), None);
    let job = ahead.saw(URL, headers(&h), &policy).unwrap();
    let ticket = ahead.take(URL).unwrap();
    drop(job);
    assert_eq!(ticket.wait(), None);
}

#[test]
fn pacing_is_asked_only_under_pace() {
    let ahead = Ahead::new();
    let spent = [("RateLimit", r#""pow-shield";r=0;t=1"#)];
    ahead.saw(URL, headers(&spent), &one_thread());
    let mut slept = Vec::new();
    drop(ahead.pace(URL, &one_thread(), |d| slept.push(d)));
    assert!(slept.is_empty());
    let pacing = Policy {
        pace: true,
        ..one_thread()
    };
    let turn = ahead.pace(URL, &pacing, |d| slept.push(d));
    assert_eq!(slept.len(), 1);
    assert!(slept[0] <= Duration::from_secs(1));
    // Sent after the reset: the next request waits for its answer.
    assert_eq!(
        ahead.pacer.before_send(&origin(URL), pacing.max_wait),
        Pace::AwaitAnswer
    );
    drop(turn);
    assert_eq!(
        ahead.pacer.before_send(&origin(URL), pacing.max_wait),
        Pace::Go(None)
    );
}

#[test]
fn only_the_shields_own_400_or_403_refused_the_solution_ahead() {
    let t = token(4, 8);
    let error = br#"{"error":"Challenge was not issued for this IP"}"#;
    let problem = br#"{"type":"tag:pow-shield,2026:malformed-challenge","title":"x"}"#;
    assert!(refused_ahead(403, headers(&[]), Some(error)));
    assert!(refused_ahead(400, headers(&[]), Some(problem)));
    // The application's own 400 or 403: the answer, never sent again.
    assert!(!refused_ahead(400, headers(&[]), None));
    assert!(!refused_ahead(403, headers(&[]), Some(b"not yours")));
    assert!(!refused_ahead(
        400,
        headers(&[]),
        Some(br#"{"error":"bad field"}"#)
    ));
    // Admitted: the next challenge is there.
    assert!(!refused_ahead(
        403,
        headers(&[("X-PoW-Next-Challenge", &t)]),
        Some(error)
    ));
    // The breaker's block is no refusal of the solution.
    let blocked = [("X-PoW-Shield", "blocked")];
    assert!(!refused_ahead(403, headers(&blocked), Some(error)));
    assert!(!refused_ahead(200, headers(&[]), Some(error)));
    assert!(!refused_ahead(409, headers(&[]), Some(error)));
}

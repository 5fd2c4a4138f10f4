//! The `pow-shield` binary shows an answer it gave up on as curl shows it
//! (issue 39): `-w '%{http_code}'` prints its 429, not `000`, `-i` its
//! head, and its body goes to stdout, while the exit code says why; `-m`
//! is the time limit of the whole request, its solves and waits included.

mod support;

use std::process::{Command, Output};

use support::*;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pow-shield"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_429_given_up_on_is_shown_as_curl_shows_it_with_the_exit_code_saying_why() {
    for (args, code) in [
        (&["--max-difficulty", "4"][..], 112),
        (&["--retries", "0"][..], 114),
        (&["--max-solve-time", "0.2", "--threads", "1"][..], 113),
    ] {
        let (c, _) = challenge("429 Too Many Requests", 12, 31);
        let fake = serve(vec![c]);
        let mut argv = vec!["get", "-s", "-w", "\n%{http_code}"];
        argv.extend_from_slice(args);
        argv.push(&fake.url);
        let out = run(&argv);
        assert_eq!(out.status.code(), Some(code), "{args:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.starts_with("{\"type\":"),
            "{args:?}: the 429's body: {text}"
        );
        assert!(text.ends_with("\n429"), "{args:?}: {text}");
        assert_eq!(fake.requests().len(), 1, "{args:?}: nothing sent after it");
    }
}

#[test]
fn a_429_given_up_on_shows_its_head_with_include() {
    let (c, _) = challenge("429 Too Many Requests", 6, 32);
    let fake = serve(vec![c]);
    let out = run(&["get", "-i", "--max-difficulty", "4", &fake.url]);
    assert_eq!(out.status.code(), Some(112));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
        "{text}"
    );
    assert!(text.contains("\r\nX-PoW-Challenge: "), "{text}");
}

#[test]
fn a_429_given_up_on_with_fail_writes_nothing_but_its_code() {
    let (c, _) = challenge("429 Too Many Requests", 6, 33);
    let fake = serve(vec![c]);
    let out = run(&[
        "get",
        "-s",
        "-f",
        "-w",
        "%{http_code}",
        "--max-difficulty",
        "4",
        &fake.url,
    ]);
    assert_eq!(out.status.code(), Some(112));
    assert_eq!(out.stdout, b"429");
}

#[test]
fn max_time_running_out_in_a_solve_is_exit_28_with_the_429_shown() {
    let (c, _) = challenge("429 Too Many Requests", 12, 34);
    let fake = serve(vec![c]);
    let out = run(&[
        "get",
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--threads",
        "1",
        "-m",
        "0.3",
        &fake.url,
    ]);
    assert_eq!(out.status.code(), Some(28));
    assert_eq!(out.stdout, b"429");
}

#[test]
fn wait_pays_a_retry_after_that_would_outlast_max_time() {
    // Its Retry-After is 1 s: within -m 5 it is waited out, not within -m 1.
    for (max_time, waits) in [("5", true), ("1", false)] {
        let (c, token) = challenge("429 Too Many Requests", 2, 35);
        let fake = serve(vec![c, ok("items")]);
        let out = run(&["get", "--wait", "-m", max_time, &fake.url]);
        assert_eq!(out.status.code(), Some(0), "-m {max_time}");
        assert_eq!(out.stdout, b"items");
        let seen = fake.requests();
        assert_eq!(unpaid(&seen[1]), waits, "-m {max_time}");
        assert_eq!(paid(&seen[1], &token), !waits, "-m {max_time}");
    }
}

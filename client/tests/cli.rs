//! The `pow-shield` binary against a scripted server: output and exit codes.

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
fn get_pays_and_prints_the_body() {
    let (c, token) = challenge("429 Too Many Requests", 2, 11);
    let fake = serve(vec![c, ok("items")]);
    let out = run(&["get", &fake.url]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, b"items");
    assert!(paid(&fake.requests()[1], &token));
}

#[test]
fn include_prints_the_status_line_and_headers_first() {
    let fake = serve(vec![ok("items")]);
    let out = run(&["get", "-i", &fake.url]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    // The header's name as the server sent it.
    assert!(text.contains("\r\nContent-Type: text/plain\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\nitems"), "{text}");
}

#[test]
fn blocked_exits_110_and_banned_111_with_a_message() {
    for (shield, code) in [("blocked", 110), ("banned", 111)] {
        let fake = serve(vec![blocked(shield)]);
        let out = run(&["get", &fake.url]);
        assert_eq!(out.status.code(), Some(code), "{shield}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(shield));
        // The body on stdout, as curl prints it.
        assert_eq!(out.stdout, b"Blocked by Circuit Breaker", "{shield}");
        assert_eq!(fake.requests().len(), 1, "{shield}: nothing sent after it");
    }
}

#[test]
fn blocked_write_out_http_code_is_403_as_curl() {
    let fake = serve(vec![blocked("blocked")]);
    let out = run(&[
        "get",
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &fake.url,
    ]);
    assert_eq!(out.status.code(), Some(110));
    assert_eq!(out.stdout, b"403");
}

#[test]
fn blocked_include_shows_the_block_response_head() {
    let fake = serve(vec![blocked("blocked")]);
    let out = run(&["get", "-i", &fake.url]);
    assert_eq!(out.status.code(), Some(110));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{text}");
    assert!(text.contains("\r\nX-PoW-Shield: blocked\r\n"), "{text}");
    assert!(
        text.ends_with("\r\nContent-Length: 26\r\n\r\nBlocked by Circuit Breaker"),
        "{text}"
    );
}

#[test]
fn blocked_with_fail_still_exits_110() {
    let fake = serve(vec![blocked("blocked")]);
    let out = run(&["get", "-f", "-w", "%{http_code}", &fake.url]);
    assert_eq!(out.status.code(), Some(110));
    assert_eq!(out.stdout, b"403");
}

#[test]
fn max_difficulty_exits_112_without_another_request() {
    let (c, _) = challenge("429 Too Many Requests", 5, 12);
    let fake = serve(vec![c, ok("never")]);
    let out = run(&["get", "--max-difficulty", "4", &fake.url]);
    assert_eq!(out.status.code(), Some(112));
    assert_eq!(fake.requests().len(), 1);
}

#[test]
fn max_solve_time_exits_113() {
    let (c, _) = challenge("429 Too Many Requests", 12, 13);
    let fake = serve(vec![c]);
    let out = run(&[
        "get",
        "--max-solve-time",
        "0.2",
        "--threads",
        "1",
        &fake.url,
    ]);
    assert_eq!(out.status.code(), Some(113));
}

#[test]
fn max_solve_time_is_30_s_unless_told_and_0_is_no_limit_in_the_help() {
    for sub in ["get", "solve"] {
        let out = run(&[sub, "--help"]);
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("--max-solve-time"), "{sub}: {text}");
        assert!(text.contains("0: no limit"), "{sub}: {text}");
        assert!(text.contains("[default: 30]"), "{sub}: {text}");
    }
}

#[test]
fn max_solve_time_0_is_no_limit() {
    let (c, token) = challenge("429 Too Many Requests", 2, 16);
    let fake = serve(vec![c, ok("items")]);
    let out = run(&["get", "--max-solve-time", "0", &fake.url]);
    assert_eq!(out.status.code(), Some(0));
    assert!(paid(&fake.requests()[1], &token));
}

#[test]
fn closed_connection_exits_52() {
    let fake = serve(vec![Answer::Close]);
    assert_eq!(run(&["get", &fake.url]).status.code(), Some(52));
}

#[test]
fn fail_exits_22_on_an_error_status_and_0_without_it() {
    let fake = serve(vec![plain("404 Not Found", &[], "no")]);
    assert_eq!(run(&["get", "-f", &fake.url]).status.code(), Some(22));
    let fake = serve(vec![plain("404 Not Found", &[], "no")]);
    assert_eq!(run(&["get", &fake.url]).status.code(), Some(0));
}

#[test]
fn connection_refused_exits_7() {
    let url = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/", l.local_addr().unwrap())
    };
    assert_eq!(run(&["get", &url]).status.code(), Some(7));
}

#[test]
fn output_goes_to_the_file_and_verbose_to_stderr() {
    let (c, _) = challenge("429 Too Many Requests", 2, 14);
    let fake = serve(vec![c, ok("items")]);
    let dir = std::env::temp_dir().join(format!("pow-shield-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("out");
    let out = run(&["get", "-v", "-o", file.to_str().unwrap(), &fake.url]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    assert_eq!(std::fs::read(&file).unwrap(), b"items");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("solving difficulty 2"), "{err}");
    assert!(err.contains("< HTTP/1.1 429"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn solve_prints_a_nonce_for_a_token_or_a_salt() {
    let (_, token) = challenge("429 Too Many Requests", 3, 15);
    let info = pow_shield_protocol::read_unverified(&token).unwrap();
    for args in [
        vec!["solve", token.as_str()],
        vec!["solve", "--salt", &info.salt, "--difficulty", "3"],
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(0));
        let nonce = String::from_utf8(out.stdout).unwrap();
        assert!(pow_shield_protocol::meets_difficulty(
            info.salt.as_bytes(),
            nonce.trim().as_bytes(),
            3
        ));
    }
}

#[test]
fn help_documents_the_exit_codes() {
    let out = run(&["--help"]);
    let text = String::from_utf8(out.stdout).unwrap();
    for code in [
        "110  blocked",
        "111  banned",
        "112  challenge harder",
        "113  no solution",
        "114  still challenged",
        "  6  the host name did not resolve",
        "28  timed out",
    ] {
        assert!(text.contains(code), "{code}");
    }
}

#[test]
fn bad_usage_exits_2() {
    assert_eq!(run(&["get"]).status.code(), Some(2));
    assert_eq!(run(&["solve", "--salt", "ab"]).status.code(), Some(2));
}

#[test]
fn max_time_exits_28_on_a_server_that_never_answers() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept() {
            held.push(stream); // open, silent
        }
    });
    let out = run(&["get", "--max-time", "0.5", &url]);
    assert_eq!(out.status.code(), Some(28));
    assert!(String::from_utf8_lossy(&out.stderr).contains("timed out"));
}

#[test]
fn a_duration_too_large_for_the_solver_exits_2_with_a_message() {
    for args in [
        &["get", "--max-solve-time", "1e30", "http://127.0.0.1:9/"][..],
        &[
            "solve",
            "--salt",
            "ab",
            "--difficulty",
            "1",
            "--max-solve-time",
            "1e30",
        ][..],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--max-solve-time") && err.contains("out of range"),
            "{err}"
        );
    }
}

#[test]
fn a_429_body_longer_than_the_challenge_limit_is_printed_whole() {
    // Read to 64 KB to look for a challenge, then handed back with the rest.
    let page = "x".repeat(100 * 1024);
    let fake = serve(vec![plain("429 Too Many Requests", &[], &page)]);
    let out = run(&["get", &fake.url]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout.len(), page.len());
}

#[test]
fn get_pays_ahead_across_urls_and_next_sets_of_one_process() {
    let (t1, t2) = (next_token(2, 31), next_token(2, 32));
    let fake = serve(vec![
        ok_ahead("a", Some(&t1), &[]),
        ok_ahead("b", Some(&t2), &[]),
        ok_ahead("c", None, &[]),
    ]);
    let out = run(&[
        "get", "-s", &fake.url, &fake.url, "--next", "-s", "-H", "X-Set: 2", &fake.url,
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, b"abc");
    let seen = fake.requests();
    assert_eq!(seen.len(), 3, "one round trip each");
    assert!(unpaid(&seen[0]));
    assert!(paid(&seen[1], &t1));
    assert!(paid(&seen[2], &t2), "the --next set took the solution");
    assert_eq!(seen[2].header("X-Set"), Some("2"));
    assert_eq!(seen[1].header("X-Set"), None);
}

#[test]
fn get_help_says_what_paying_ahead_pace_and_next_do() {
    let out = run(&["get", "--help"]);
    let text = String::from_utf8(out.stdout).unwrap();
    for said in ["Paying ahead", "X-PoW-Next-Challenge", "--pace", "--next"] {
        assert!(text.contains(said), "{said}");
    }
}

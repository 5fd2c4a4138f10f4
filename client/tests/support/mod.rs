//! A scripted HTTP server on loopback: each connection gets the next
//! scripted answer, then is closed. Requests are recorded.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::thread;

use pow_shield_client::{Policy, SolveOptions};
use pow_shield_protocol::wire::ChallengeBody;
use pow_shield_protocol::{issue_challenge_with_salt, Secret, SecretKeys};

/// One recorded request.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What to answer one connection with.
pub enum Answer {
    /// A whole response, sent as is.
    Raw(String),
    /// Close without answering (nginx's 444).
    Close,
}

pub struct Fake {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Fake {
    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

pub fn serve(script: Vec<Answer>) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/api/items", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    thread::spawn(move || {
        for answer in script {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                continue;
            }
            let mut parts = line.split_whitespace();
            let method = parts.next().unwrap_or_default().to_owned();
            let path = parts.next().unwrap_or_default().to_owned();
            let mut headers = Vec::new();
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                if let Some((k, v)) = h.split_once(':') {
                    headers.push((k.trim().to_owned(), v.trim().to_owned()));
                }
            }
            let len = headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0usize);
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            log.lock().unwrap().push(Seen {
                method,
                path,
                headers,
                body,
            });
            let mut stream = reader.into_inner();
            if let Answer::Raw(text) = answer {
                let _ = stream.write_all(text.as_bytes());
            }
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    });
    Fake { url, seen }
}

fn response(status: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut text = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (k, v) in headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    text
}

/// A challenge as the module sends it, signed with a test key.
pub fn challenge(status: &str, difficulty: u8, salt_byte: u8) -> (Answer, String) {
    let keys = SecretKeys::single(Secret::new(&[b'k'; 32]).unwrap());
    let c = issue_challenge_with_salt(&keys, "127.0.0.1", 1, 60_000, difficulty, [salt_byte; 16]);
    let error = (!status.starts_with("429")).then_some("Challenge already spent");
    let body = ChallengeBody::new(error, &c.token, &c.salt, c.difficulty, 60).to_json();
    let d = difficulty.to_string();
    let text = response(
        status,
        &[
            ("Content-Type", "application/json"),
            ("X-PoW-Challenge", &c.token),
            ("X-PoW-Difficulty", &d),
            ("Retry-After", "1"),
        ],
        &body,
    );
    (Answer::Raw(text), c.token)
}

/// The default policy, but solving on one thread and giving up on one
/// challenge after `ms`.
pub fn one_thread_within(ms: u64) -> Policy {
    Policy {
        solve: SolveOptions {
            threads: 1,
            max_solve_time: Some(std::time::Duration::from_millis(ms)),
            ..SolveOptions::default()
        },
        ..Policy::default()
    }
}

pub fn ok(body: &str) -> Answer {
    Answer::Raw(response("200 OK", &[("Content-Type", "text/plain")], body))
}

pub fn plain(status: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    Answer::Raw(response(status, headers, body))
}

pub fn blocked(shield: &str) -> Answer {
    plain(
        "403 Forbidden",
        &[("Content-Type", "text/plain"), ("X-PoW-Shield", shield)],
        "Blocked by Circuit Breaker",
    )
}

/// Whether the request carried a correct solution of `token`.
pub fn paid(seen: &Seen, token: &str) -> bool {
    let info = pow_shield_protocol::read_unverified(token).unwrap();
    seen.header("X-PoW-Challenge") == Some(token)
        && seen.header("X-PoW-Nonce").is_some_and(|n| {
            pow_shield_protocol::meets_difficulty(
                info.salt.as_bytes(),
                n.as_bytes(),
                info.difficulty,
            )
        })
}

/// A next challenge of `difficulty` hex digits issued now (valid for a
/// minute), as `X-PoW-Next-Challenge` carries it.
pub fn next_token(difficulty: u8, salt_byte: u8) -> String {
    let keys = SecretKeys::single(Secret::new(&[b'k'; 32]).unwrap());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let now_ms = u64::try_from(now.as_millis()).unwrap();
    issue_challenge_with_salt(
        &keys,
        "127.0.0.1",
        now_ms,
        60_000,
        difficulty,
        [salt_byte; 16],
    )
    .token
}

/// A 200 carrying `next` as its next challenge, with `headers` beside.
pub fn ok_ahead(body: &str, next: Option<&str>, headers: &[(&str, &str)]) -> Answer {
    let mut all: Vec<(&str, &str)> = vec![("Content-Type", "text/plain")];
    if let Some(t) = next {
        all.push(("X-PoW-Next-Challenge", t));
    }
    all.extend_from_slice(headers);
    Answer::Raw(response("200 OK", &all, body))
}

/// Whether the request carried no solution at all.
pub fn unpaid(seen: &Seen) -> bool {
    seen.header("X-PoW-Challenge").is_none() && seen.header("X-PoW-Nonce").is_none()
}

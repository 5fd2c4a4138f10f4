//! What a Redis Sentinel (or anything at its address) may answer, read the
//! way a `sentinel://` client reads it (`redis::sentinel`, the pure part of
//! `src/redis/sentinel.rs`): `SENTINEL get-master-addr-by-name`, `ROLE`,
//! and the `+switch-master` messages of a subscription.
//!
//! Three readers of the same bytes:
//! - each frame through `master_addr`, `is_master`, `role` and
//!   `switched_to`: an address comes out only from a two-part answer, with
//!   a port and a host a connection can be made to;
//! - a master connection's handshake (AUTH, ROLE, SCRIPT LOAD) through
//!   `Pipeline`: ready exactly when the three replies are no errors and
//!   the ROLE reply (which may nest: read as `CLUSTER SLOTS` is) says
//!   master;
//! - a subscription (AUTH, SUBSCRIBE) through a subscriber `Pipeline`, fed
//!   in chunks: what follows the handshake are pushes, never answers.
//!
//! Input: `n`, the master's name (`n % 16` bytes), the chunk size, then the
//! peer's bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pow_shield_core::metrics::Sent;
use pow_shield_core::redis::command::{decode_reply, decode_topology, Decoded};
use pow_shield_core::redis::pipeline::{Event, Pipeline, ROLE_STEP};
use pow_shield_core::redis::sentinel::{is_master, master_addr, role, switched_to};
use redis_protocol::resp2::types::OwnedFrame;

fn usable_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
}

/// One frame through every reader of a sentinel's answers.
fn read(frame: &OwnedFrame, name: &str) {
    if let Ok(Some(addr)) = master_addr(frame) {
        assert!(matches!(frame, OwnedFrame::Array(parts) if parts.len() == 2));
        assert!(addr.port != 0, "port 0");
        assert!(usable_host(&addr.host), "host {:?}", addr.host);
    }
    if is_master(frame) {
        assert_eq!(role(frame), "master");
    }
    if let Some(addr) = switched_to(frame, name) {
        assert!(matches!(frame, OwnedFrame::Array(parts) if parts.len() == 3));
        assert!(addr.port != 0, "port 0");
        assert!(usable_host(&addr.host), "host {:?}", addr.host);
    }
}

/// The frames of `stream`, as the pipeline decodes them: a reply, except
/// at `topology` (ROLE's place: its reply nests, a master lists its
/// replicas), decoded as `CLUSTER SLOTS` is.
fn frames(mut stream: &[u8], topology: Option<usize>) -> Vec<OwnedFrame> {
    let mut out = Vec::new();
    loop {
        let decoded = if topology == Some(out.len()) {
            decode_topology(stream)
        } else {
            decode_reply(stream)
        };
        let Decoded::Frame(frame, used) = decoded else {
            return out;
        };
        stream = &stream[used..];
        out.push(frame.into_owned());
    }
}

fn handshake(labels: &[&'static str]) -> Vec<(&'static str, Vec<u8>)> {
    labels
        .iter()
        .map(|label| (*label, format!("{label};").into_bytes()))
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let [n, rest @ ..] = data else {
        return;
    };
    let (name, rest) = rest.split_at(usize::from(*n % 16).min(rest.len()));
    let name = String::from_utf8_lossy(name);
    let [chunk, stream @ ..] = rest else {
        return;
    };
    let chunk = 1 + usize::from(*chunk);

    for frame in &frames(stream, None) {
        read(frame, &name);
    }
    // as the master's handshake reads them: ROLE's reply second
    let decoded = frames(stream, Some(1));
    for frame in &decoded {
        read(frame, &name);
    }

    // A master connection: AUTH, then ROLE, then SCRIPT LOAD.
    let mut master: Pipeline<u32> = Pipeline::default();
    master.open(&handshake(&["AUTH", ROLE_STEP, "SCRIPT LOAD"]), 0, Sent::default);
    master.input().extend_from_slice(stream);
    let mut events = Vec::new();
    let _ = master.receive(&mut events);
    let ready = events.iter().any(|e| matches!(e, Event::Ready));
    let expected = match decoded.as_slice() {
        [auth, role, load, ..] => {
            ![auth, role, load]
                .iter()
                .any(|f| matches!(f, OwnedFrame::Error(_)))
                && is_master(role)
        }
        _ => false,
    };
    assert_eq!(ready, expected, "ready iff no step failed and ROLE says master");
    assert!(
        events
            .iter()
            .all(|e| matches!(e, Event::Step { .. } | Event::Ready)),
        "a handshake alone answers no request"
    );

    // A subscription, fed in chunks.
    let mut sub: Pipeline<u32> = Pipeline::subscriber();
    sub.open(&handshake(&["AUTH", "SUBSCRIBE"]), 0, Sent::default);
    let (mut ready, mut steps) = (false, 0);
    for part in stream.chunks(chunk) {
        sub.input().extend_from_slice(part);
        let mut events = Vec::new();
        let result = sub.receive(&mut events);
        for event in events {
            match event {
                Event::Step { .. } => {
                    assert!(!ready, "a step after ready");
                    steps += 1;
                }
                Event::Ready => {
                    assert_eq!(steps, 2, "ready after both steps");
                    ready = true;
                }
                Event::Push(frame) => {
                    assert!(ready, "a push before the subscription is made");
                    read(&frame, &name);
                }
                Event::Answered { .. } => panic!("an answer on a connection that asked nothing"),
                Event::Clock(_) => panic!("a clock from a handshake without TIME"),
            }
        }
        if result.is_err() {
            break;
        }
    }
});

//! A real `redis-server` for the scripts' tests, one per test run, and a
//! blocking client of it (tests may block; the module never does).
//!
//! Why a real Redis rather than an embedded Lua 5.1 with a `redis.call` of
//! our own: what the scripts decide rests on Redis's commands as Redis runs
//! them (ZRANGE ranks, PEXPIRE and PTTL on missing keys, `SET … NX`/`GET`,
//! INCRBY of a missing key, Lua numbers turned into integer replies,
//! `INFO`'s run id, `TIME`), and a `redis.call` of our own would be one
//! more model of Redis to trust, the very thing these tests check. Redis
//! 7 runs Lua 5.1 itself, and the t/ suites need it installed anyway.
//!
//! No `redis-server` fails the tests, loudly; `POW_SHIELD_SKIP_REDIS=1`
//! turns that into a skip, printed. The server runs under a shell that
//! kills it when this process's end closes the shell's stdin.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis_protocol::resp2::decode::decode;
use redis_protocol::resp2::encode::encode_borrowed;
use redis_protocol::resp2::types::{BorrowedFrame, OwnedFrame};

use crate::cluster::scripts::{Script, Scripts};

/// The environment variable that lets the tests skip without a Redis.
const SKIP: &str = "POW_SHIELD_SKIP_REDIS";

struct Server {
    port: u16,
    /// Closed when the process ends: the shell then kills the server.
    _stdin: Mutex<ChildStdin>,
}

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();

fn start() -> Result<Server, String> {
    let bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned());
    Command::new(&bin)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {bin}: {e}"))?;
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let script = r#""$0" --port "$1" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize no --loglevel warning & pid=$!; read _; kill $pid"#;
    let mut shell = Command::new("sh")
        .args(["-c", script, &bin, &port.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {bin}: {e}"))?;
    let stdin = shell.stdin.take().ok_or("no stdin")?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(format!("{bin} did not answer on port {port}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Server {
        port,
        _stdin: Mutex::new(stdin),
    })
}

/// One connection to the test run's Redis.
pub struct Redis {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Redis {
    /// A connection to the run's server (started on first use); `None`
    /// only when it is missing and `POW_SHIELD_SKIP_REDIS=1` says to skip.
    pub fn connect(test: &str) -> Option<Redis> {
        let port = match SERVER.get_or_init(start) {
            Ok(server) => server.port,
            Err(why) if std::env::var(SKIP).is_ok_and(|v| v == "1") => {
                eprintln!("SKIPPED {test}: no redis-server ({why}); {SKIP}=1");
                return None;
            }
            Err(why) => panic!(
                "the scripts' tests need a redis-server (Redis 7): {why}; \
                 set {SKIP}=1 to skip them"
            ),
        };
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to redis-server");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        Some(Redis {
            stream,
            buf: Vec::new(),
        })
    }

    /// One command, its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> OwnedFrame {
        let parts: Vec<BorrowedFrame> = args.iter().map(|a| BorrowedFrame::BulkString(a)).collect();
        let frame = BorrowedFrame::Array(&parts);
        let mut out = vec![0; frame.encode_len(false)];
        let n = encode_borrowed(&mut out, &frame, false).expect("encode");
        self.stream
            .write_all(&out[..n])
            .expect("write to redis-server");
        self.read_reply()
    }

    fn read_reply(&mut self) -> OwnedFrame {
        loop {
            if let Some((frame, used)) = decode(&self.buf).expect("RESP2 from redis-server") {
                self.buf.drain(..used);
                return frame;
            }
            let mut chunk = [0; 4096];
            let n = self
                .stream
                .read(&mut chunk)
                .expect("read from redis-server");
            assert!(n > 0, "redis-server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Runs `script` by its SHA-1 (loading it on `NOSCRIPT`), without a
    /// deadline (its last argument 0: `redis::clock`).
    pub fn eval(&mut self, script: &Script, keys: &[String], args: &[String]) -> OwnedFrame {
        self.eval_by(script, keys, args, 0)
    }

    /// [`Redis::eval`] with a deadline in Redis's clock (ms).
    pub fn eval_by(
        &mut self,
        script: &Script,
        keys: &[String],
        args: &[String],
        deadline_ms: u64,
    ) -> OwnedFrame {
        let numkeys = keys.len().to_string();
        let deadline = deadline_ms.to_string();
        let mut call: Vec<&[u8]> = vec![b"EVALSHA", script.sha1.as_bytes(), numkeys.as_bytes()];
        call.extend(keys.iter().map(|k| k.as_bytes()));
        call.extend(args.iter().map(|a| a.as_bytes()));
        call.push(deadline.as_bytes());
        match self.call(&call) {
            OwnedFrame::Error(e) if e.starts_with("NOSCRIPT") => {
                let loaded = self.call(&[b"SCRIPT", b"LOAD", script.text.as_bytes()]);
                assert_eq!(
                    loaded,
                    OwnedFrame::BulkString(script.sha1.clone().into_bytes())
                );
                self.call(&call)
            }
            reply => reply,
        }
    }

    /// One command as the node encodes it (`Calls`), its reply.
    pub fn raw(&mut self, command: &[u8]) -> OwnedFrame {
        self.stream
            .write_all(command)
            .expect("write to redis-server");
        self.read_reply()
    }

    /// Runs `script`, whose reply is an array of integers.
    pub fn ints(&mut self, script: &Script, keys: &[String], args: &[String]) -> Vec<i64> {
        match self.eval(script, keys, args) {
            OwnedFrame::Array(items) => items
                .iter()
                .map(|f| match f {
                    OwnedFrame::Integer(i) => *i,
                    other => panic!("{}: not an integer: {other:?}", script.name),
                })
                .collect(),
            other => panic!("{}: {other:?}", script.name),
        }
    }

    /// Redis's clock, in ms (the scripts' `TIME`).
    pub fn now_ms(&mut self) -> u64 {
        match self.call(&[b"TIME"]) {
            OwnedFrame::Array(t) => match &t[..] {
                [OwnedFrame::BulkString(s), OwnedFrame::BulkString(us)] => {
                    let n = |b: &[u8]| -> u64 { std::str::from_utf8(b).unwrap().parse().unwrap() };
                    n(s) * 1000 + n(us) / 1000
                }
                other => panic!("TIME: {other:?}"),
            },
            other => panic!("TIME: {other:?}"),
        }
    }
}

/// Every script of both modes loads, and Redis names it by our SHA-1.
#[test]
fn every_script_of_both_modes_loads_under_the_sha1_we_call_it_by() {
    let Some(mut redis) = Redis::connect("every_script_loads") else {
        return;
    };
    for cluster in [false, true] {
        for script in Scripts::for_mode(cluster).iter() {
            let loaded = redis.call(&[b"SCRIPT", b"LOAD", script.text.as_bytes()]);
            assert_eq!(
                loaded,
                OwnedFrame::BulkString(script.sha1.clone().into_bytes()),
                "{} (cluster {cluster})",
                script.name
            );
        }
    }
}

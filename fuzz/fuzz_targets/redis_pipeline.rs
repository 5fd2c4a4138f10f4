//! One Redis connection as the client drives it (`redis::pipeline`):
//! commands of every kind queued (requests, with and without a NOSCRIPT
//! resend, `CLUSTER SLOTS`, the handshake), then whatever the peer sends,
//! in fragments, through `Pipeline::receive`. A model of the slot queue
//! checks every event against the slot it belongs to.
//!
//! Input: `n`, then `n` operation bytes, then the peer's byte stream. The
//! low 3 bits of an operation choose it, the high 5 bits (`arg`) size it:
//! 0 abandon and reopen with `arg % 4` handshake steps (a reconnect),
//! 1 a request, 2 a request with a NOSCRIPT resend, 3 `CLUSTER SLOTS`,
//! 4 feed `arg * 7 + 1` more bytes and receive, 5 the socket took
//! `arg * 16` bytes of output, 6 abandon, 7 feed everything left and receive.
#![no_main]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use libfuzzer_sys::fuzz_target;
use pow_shield_core::metrics::Sent;
use pow_shield_core::redis::pipeline::{Event, Pipeline, Resendable, Slot, MAX_INPUT};

const HANDSHAKE: [(&str, &[u8]); 3] = [("AUTH", b"A;"), ("SELECT", b"S;"), ("SCRIPT LOAD", b"L;")];

/// A slot as the model sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Handshake,
    /// A request (or `CLUSTER SLOTS`) and whether NOSCRIPT would resend it.
    Request {
        id: u32,
        resend: bool,
    },
}

/// The resends that ran, in order: the slot's id and the bytes made.
type ResendLog = Rc<RefCell<Vec<(u32, Vec<u8>)>>>;

struct Model {
    pipeline: Pipeline<u32>,
    queue: VecDeque<Kind>,
    /// What should still go out.
    out: Vec<u8>,
    resent: ResendLog,
    next_id: u32,
    pushed: u32,
    answered: u32,
    /// The last `receive` failed and nothing reopened the connection since.
    broken: bool,
}

/// A request's command, whose NOSCRIPT resend is logged.
struct Logged {
    id: u32,
    command: Vec<u8>,
    log: ResendLog,
}

impl Resendable for Logged {
    fn bytes(&self) -> &[u8] {
        &self.command
    }

    fn on_noscript(&self) -> Option<Vec<u8>> {
        let eval = format!("E{};", self.id).into_bytes();
        self.log.borrow_mut().push((self.id, eval.clone()));
        Some(eval)
    }
}

impl Model {
    fn push(&mut self, kind: u8) {
        self.next_id += 1;
        self.pushed += 1;
        let id = self.next_id;
        let command = format!("C{id};").into_bytes();
        let (slot, resend) = match kind {
            1 => (Slot::request(0, id, None), false),
            2 => {
                let log = Rc::clone(&self.resent);
                let resend = Rc::new(Logged {
                    id,
                    command: command.clone(),
                    log,
                });
                (Slot::request(0, id, Some(resend)), true)
            }
            _ => (Slot::topology(0, id), false),
        };
        self.pipeline.push(&command, slot);
        self.out.extend_from_slice(&command);
        self.queue.push_back(Kind::Request { id, resend });
    }

    fn abandon(&mut self) {
        let (requests, failed) = self.pipeline.abandon();
        let waiting: Vec<u32> = self
            .queue
            .iter()
            .filter_map(|k| match k {
                Kind::Request { id, .. } => Some(*id),
                Kind::Handshake => None,
            })
            .collect();
        assert_eq!(requests, waiting.len());
        assert_eq!(
            failed, waiting,
            "abandon returns the waiting requests in order"
        );
        assert!(self.pipeline.is_idle() && self.pipeline.output().is_empty());
        self.queue.clear();
        self.out.clear();
        self.broken = false;
    }

    fn open(&mut self, steps: usize) {
        self.abandon();
        let handshake: Vec<(&'static str, Vec<u8>)> = HANDSHAKE[..steps]
            .iter()
            .map(|(label, command)| (*label, command.to_vec()))
            .collect();
        self.pipeline.open(&handshake, 0, Sent::default);
        for (_, command) in &handshake {
            self.out.extend_from_slice(command);
            self.queue.push_back(Kind::Handshake);
        }
        assert_eq!(self.pipeline.output(), &self.out[..]);
    }

    /// Moves resent slots at the front of the queue to its back, as the
    /// pipeline did when it read their NOSCRIPT.
    fn requeue_resent(&mut self, pending: &mut VecDeque<(u32, Vec<u8>)>) {
        while let (Some(Kind::Request { id, resend: true }), Some((resent, _))) =
            (self.queue.front().copied(), pending.front())
        {
            if id != *resent {
                break;
            }
            let (_, eval) = pending.pop_front().expect("checked above");
            self.queue.pop_front();
            self.queue.push_back(Kind::Request { id, resend: false });
            self.out.extend_from_slice(&eval);
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        self.pipeline.input().extend_from_slice(bytes);
        let mut events = Vec::new();
        let result = self.pipeline.receive(&mut events);
        let mut pending: VecDeque<_> = self.resent.borrow_mut().drain(..).collect();
        let mut last_step = false;
        for event in events {
            assert!(!self.broken, "an event from a broken connection");
            self.requeue_resent(&mut pending);
            match event {
                Event::Step { .. } => {
                    assert_eq!(self.queue.pop_front(), Some(Kind::Handshake));
                    last_step = true;
                    continue;
                }
                Event::Ready => {
                    assert!(last_step, "ready follows a handshake step");
                    assert!(
                        !self.queue.contains(&Kind::Handshake),
                        "ready before the last handshake step"
                    );
                }
                Event::Answered { on_reply, .. } => {
                    let id = on_reply.expect("a request slot has its callback");
                    match self.queue.pop_front() {
                        Some(Kind::Request { id: front, .. }) => {
                            assert_eq!(id, front, "answer for another slot");
                        }
                        other => panic!("answer {id} delivered to {other:?}"),
                    }
                    self.answered += 1;
                    assert!(self.answered <= self.pushed, "more answers than requests");
                }
                // Only a subscriber's pipeline (Sentinel's) hands frames on.
                Event::Push(_) => panic!("a push on a connection that never subscribed"),
                Event::Clock(_) => panic!("a clock from a handshake without TIME"),
            }
            last_step = false;
        }
        self.requeue_resent(&mut pending);
        assert!(
            pending.is_empty(),
            "resent a slot not at the front: {pending:?}"
        );
        assert_eq!(
            self.pipeline.output(),
            &self.out[..],
            "output after receive"
        );
        match result {
            Ok(()) => {
                assert!(!self.broken, "a broken connection read on");
                assert!(self.pipeline.input().len() <= MAX_INPUT, "unbounded input");
            }
            Err(_) => {
                self.broken = true;
                // It stays broken, whatever else arrives, until reopened.
                let mut again = Vec::new();
                self.pipeline.input().extend_from_slice(b"+OK\r\n");
                assert!(
                    self.pipeline.receive(&mut again).is_err(),
                    "broken, then not"
                );
                assert!(again.is_empty(), "events from a broken connection");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [n, rest @ ..] = data else {
        return;
    };
    let (ops, mut stream) = rest.split_at(usize::from(*n).min(rest.len()));
    let mut m = Model {
        pipeline: Pipeline::default(),
        queue: VecDeque::new(),
        out: Vec::new(),
        resent: Rc::default(),
        next_id: 0,
        pushed: 0,
        answered: 0,
        broken: false,
    };
    m.open(HANDSHAKE.len());
    for &op in ops {
        let arg = usize::from(op >> 3);
        match op & 7 {
            0 => m.open(arg % (HANDSHAKE.len() + 1)),
            1..=3 => m.push(op & 7),
            4 => {
                let (chunk, left) = stream.split_at((arg * 7 + 1).min(stream.len()));
                stream = left;
                m.feed(chunk);
            }
            5 => {
                let n = (arg * 16).min(m.out.len());
                m.pipeline.sent(arg * 16);
                m.out.drain(..n);
                assert_eq!(m.pipeline.output(), &m.out[..]);
            }
            6 => m.abandon(),
            _ => {
                m.feed(stream);
                stream = &[];
            }
        }
    }
    m.feed(stream);
});

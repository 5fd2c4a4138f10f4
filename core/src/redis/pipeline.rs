//! What flows over one Redis connection, without the socket (pure,
//! unit-tested on byte streams): commands appended for one flush, replies
//! framed and matched to their slots in order, `NOSCRIPT` answered by
//! re-sending the command as `EVAL`, and the handshake (AUTH, SELECT,
//! SCRIPT LOAD) that opens every connection.
//!
//! The socket code (the module's `redis/connection.rs` and `link.rs`) moves bytes in and out and turns `Broken`
//! into a closed connection; everything decided about those bytes is here.

use std::collections::VecDeque;

use redis_protocol::resp2::types::OwnedFrame;

use super::clock;
use super::command::{decode_reply, decode_topology, is_noscript, Decoded, MAX_REPLY};
use super::sentinel;
use crate::metrics::Sent;

/// Bytes read from the socket per `recv`.
pub const READ_CHUNK: usize = 16 * 1024;
/// Unread input we keep: `decode_reply` refuses any reply larger than ours
/// (and `decode_topology` a map larger than `MAX_TOPOLOGY`, which is
/// smaller) as it arrives, so this only backs that up.
pub const MAX_INPUT: usize = 2 * MAX_REPLY + READ_CHUNK;

/// A command as sent, in the one allocation a call that everything
/// which may send it again shares: a redirection, and what Redis
/// answering `NOSCRIPT` makes sent instead.
pub trait Resendable {
    /// Its bytes.
    fn bytes(&self) -> &[u8];

    /// What to send instead when Redis answers `NOSCRIPT` (a script
    /// call as `EVAL`, made only then); `None`: the error is its reply.
    fn on_noscript(&self) -> Option<Vec<u8>> {
        None
    }
}

/// A plain command: nothing to send instead.
impl Resendable for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// A command shared ([`Resendable`]).
pub type Resend = std::rc::Rc<dyn Resendable>;

/// `ASKING`, as the pipeline sends it again before an EVAL.
const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

/// One command waiting for its reply. `R` is what its owner gets back.
pub struct Slot<R> {
    /// When the reply is overdue (nginx's millisecond clock).
    pub deadline: u64,
    /// The same moment in Redis's clock, stamped on a script call (and on
    /// its `EVAL` if Redis lost the script): `clock::stamp`.
    pub redis_deadline: Option<u64>,
    on_reply: Option<R>,
    /// The command itself, which makes the EVAL to send instead if Redis
    /// answers NOSCRIPT (a plain command makes none: the error is its
    /// reply).
    on_noscript: Option<Resend>,
    /// A handshake step: an error reply breaks the connection with this label.
    handshake: Option<&'static str>,
    /// Its reply is the cluster map (`CLUSTER SLOTS`): nested and larger.
    topology: bool,
    /// It went after `ASKING` (a Redis Cluster's slot migrating): so does
    /// its EVAL, if Redis lost the script (`ASKING` holds for one command).
    asking: bool,
    /// The pipeline's own `ASKING` before such an EVAL: its reply is read
    /// and dropped (no request waits on it, none was admitted for it).
    silent: bool,
    /// When it was queued, to time its reply (metrics).
    pub sent: Sent,
}

impl<R> Slot<R> {
    /// A request's command.
    pub fn request(deadline: u64, on_reply: R, on_noscript: Option<Resend>) -> Self {
        Slot {
            deadline,
            redis_deadline: None,
            on_reply: Some(on_reply),
            on_noscript,
            handshake: None,
            topology: false,
            asking: false,
            silent: false,
            sent: Sent::default(),
        }
    }

    /// The same, sent right after `ASKING`.
    pub fn after_asking(self) -> Self {
        Slot {
            asking: true,
            ..self
        }
    }

    /// A `CLUSTER SLOTS` command.
    pub fn topology(deadline: u64, on_reply: R) -> Self {
        Slot {
            topology: true,
            ..Slot::request(deadline, on_reply, None)
        }
    }

    pub fn is_handshake(&self) -> bool {
        self.handshake.is_some()
    }
}

/// What a reply did.
pub enum Event<R> {
    /// A request's reply: a frame, or the text of an error reply (Redis is
    /// up but refused this one command: only its request fails).
    Answered {
        on_reply: Option<R>,
        reply: Result<OwnedFrame, String>,
        /// When its command was queued.
        sent: Sent,
        /// When its reply was due (nginx's millisecond clock).
        deadline: u64,
    },
    /// A handshake step succeeded (its command was queued at `sent`).
    Step { sent: Sent },
    /// The last handshake step succeeded: the connection is ready.
    Ready,
    /// A message on a subscribed connection (see `Pipeline::subscriber`).
    Push(OwnedFrame),
    /// The handshake's `TIME` ([`CLOCK_STEP`]) read Redis's clock at this
    /// ms (`clock::RedisClock::learn`).
    Clock(u64),
}

/// The handshake step that reads Redis's clock (`TIME`): a connection
/// learns the offset of a call's deadline from it (`clock`).
pub const CLOCK_STEP: &str = "TIME";

/// The handshake step whose reply must say `master` (a `sentinel://`
/// master: a replica, or a former master the sentinels demoted, is not
/// used).
pub const ROLE_STEP: &str = "ROLE";

/// The connection can't be trusted any more and must be closed; the text
/// says why, for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Broken {
    /// An unreadable, oversized or unexpected reply.
    Protocol(String),
    /// Redis refused a handshake step (AUTH, SELECT, SCRIPT LOAD).
    Handshake(String),
}

/// Commands out, replies in, for one connection.
pub struct Pipeline<R> {
    out: Vec<u8>,
    input: Vec<u8>,
    slots: VecDeque<Slot<R>>,
    /// Set by the `receive` that broke the connection: later ones answer
    /// the same and read nothing more, until `open` or `abandon`.
    broken: Option<Broken>,
    /// A `SUBSCRIBE`d connection: replies nobody waits for are messages.
    subscriber: bool,
}

impl<R> Default for Pipeline<R> {
    fn default() -> Self {
        Pipeline {
            out: Vec::with_capacity(4096),
            input: Vec::with_capacity(READ_CHUNK),
            slots: VecDeque::new(),
            broken: None,
            subscriber: false,
        }
    }
}

impl<R> Pipeline<R> {
    /// A connection that subscribes (in its handshake): frames that no
    /// slot waits for are `Event::Push`, not a broken connection.
    pub fn subscriber() -> Self {
        Pipeline {
            subscriber: true,
            ..Pipeline::default()
        }
    }

    /// A new connection: forgets the bytes of the old one and queues the
    /// handshake first, each step due by `deadline` and stamped by `sent`.
    pub fn open(
        &mut self,
        handshake: &[(&'static str, Vec<u8>)],
        deadline: u64,
        sent: impl Fn() -> Sent,
    ) {
        self.out.clear();
        self.input.clear();
        self.broken = None;
        for (label, command) in handshake {
            self.push(
                command,
                Slot {
                    deadline,
                    redis_deadline: None,
                    on_reply: None,
                    on_noscript: None,
                    handshake: Some(label),
                    // ROLE's reply nests (a master lists its replicas).
                    topology: *label == ROLE_STEP,
                    asking: false,
                    silent: false,
                    sent: sent(),
                },
            );
        }
    }

    /// Appends a command; it goes out with the next flush. A script call's
    /// deadline is stamped in Redis's clock (`Slot::redis_deadline`).
    pub fn push(&mut self, command: &[u8], slot: Slot<R>) {
        let at = self.out.len();
        self.out.extend_from_slice(command);
        if let Some(deadline) = slot.redis_deadline {
            clock::stamp(&mut self.out[at..], deadline);
        }
        self.slots.push_back(slot);
    }

    /// What is still to be sent.
    pub fn output(&self) -> &[u8] {
        &self.out
    }

    /// The socket took the first `n` bytes of the output.
    pub fn sent(&mut self, n: usize) {
        self.out.drain(..n.min(self.out.len()));
    }

    /// The input buffer, for the socket to append what it reads.
    pub fn input(&mut self) -> &mut Vec<u8> {
        &mut self.input
    }

    /// The oldest slot still waiting (its deadline is the one to watch).
    pub fn oldest(&self) -> Option<&Slot<R>> {
        self.slots.front()
    }

    pub fn is_idle(&self) -> bool {
        self.slots.is_empty()
    }

    /// Whether a command other than the handshake waits for its reply
    /// (the handshake goes first: the last slot tells).
    pub fn awaits_commands(&self) -> bool {
        self.slots.back().is_some_and(|s| !s.is_handshake())
    }

    /// The connection is gone: drops its bytes and returns what waited,
    /// as (request slots, their callbacks).
    pub fn abandon(&mut self) -> (usize, Vec<R>) {
        self.out.clear();
        self.input.clear();
        self.broken = None;
        let requests = self.slots.iter().filter(|s| !s.is_handshake()).count();
        let failed = self.slots.drain(..).filter_map(|s| s.on_reply).collect();
        (requests, failed)
    }

    /// Matches every complete reply in the input to its slot, in order,
    /// appending what happened to `events`. Once it fails, it fails the
    /// same way until the connection is reopened or abandoned.
    pub fn receive(&mut self, events: &mut Vec<Event<R>>) -> Result<(), Broken> {
        if let Some(broken) = &self.broken {
            return Err(broken.clone());
        }
        let mut used = 0;
        let result = loop {
            let topology = self.slots.front().is_some_and(|s| s.topology);
            let input = &self.input[used..];
            let decoded = if topology {
                decode_topology(input)
            } else {
                decode_reply(input)
            };
            let frame = match decoded {
                Decoded::Frame(frame, n) => {
                    used += n;
                    frame
                }
                Decoded::Partial => break Ok(()),
                Decoded::Corrupt(why) => {
                    break Err(Broken::Protocol(format!("unreadable reply: {why}")))
                }
            };
            let Some(mut slot) = self.slots.pop_front() else {
                if self.subscriber {
                    events.push(Event::Push(frame));
                    continue;
                }
                break Err(Broken::Protocol("a reply nobody asked for".to_owned()));
            };
            if slot.silent {
                continue;
            }
            if is_noscript(&frame) {
                if let Some(eval) = slot.on_noscript.take().and_then(|r| r.on_noscript()) {
                    // The script cache was flushed: resend as EVAL, at the
                    // back of the queue, like any new command; after
                    // `ASKING` again if it went after one (else the slot's
                    // new node answers MOVED, its old one ASK, to the end).
                    if slot.asking {
                        let asking = Slot {
                            deadline: slot.deadline,
                            redis_deadline: None,
                            on_reply: None,
                            on_noscript: None,
                            handshake: None,
                            topology: false,
                            asking: false,
                            silent: true,
                            sent: slot.sent,
                        };
                        self.push(ASKING, asking);
                    }
                    self.push(&eval, slot);
                    continue;
                }
            }
            if let Some(label) = slot.handshake {
                match &frame {
                    // A proxy that refuses TIME: calls go without a
                    // deadline (`clock`), as before the first answer.
                    OwnedFrame::Error(_) if label == CLOCK_STEP => {}
                    OwnedFrame::Error(e) => {
                        break Err(Broken::Handshake(format!("{label} failed: {e}")));
                    }
                    _ => {}
                }
                if label == ROLE_STEP && !sentinel::is_master(&frame) {
                    let role = sentinel::role(&frame);
                    break Err(Broken::Handshake(format!(
                        "ROLE: not the master (it is a {role})"
                    )));
                }
                if label == CLOCK_STEP {
                    if let Some(ms) = clock::time_ms(&frame) {
                        events.push(Event::Clock(ms));
                    }
                }
                events.push(Event::Step { sent: slot.sent });
                if self.slots.iter().all(|s| !s.is_handshake()) {
                    events.push(Event::Ready);
                }
                continue;
            }
            let reply = match frame {
                OwnedFrame::Error(e) => Err(e),
                frame => Ok(frame),
            };
            events.push(Event::Answered {
                on_reply: slot.on_reply.take(),
                reply,
                sent: slot.sent,
                deadline: slot.deadline,
            });
        };
        self.input.drain(..used);
        let result = match result {
            Ok(()) if self.input.len() > MAX_INPUT => {
                Err(Broken::Protocol("reply too large".to_owned()))
            }
            result => result,
        };
        if let Err(broken) = &result {
            self.broken = Some(broken.clone());
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::command::encode;
    use std::rc::Rc;

    fn command(args: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(&mut out, args);
        out
    }

    fn handshake() -> Vec<(&'static str, Vec<u8>)> {
        vec![
            ("AUTH", command(&[b"AUTH", b"pw"])),
            ("SCRIPT LOAD", command(&[b"SCRIPT", b"LOAD", b"return 1"])),
        ]
    }

    /// Feeds `bytes` and returns what happened, as text (handshake steps
    /// but the last are left out: only their timing is of interest).
    fn feed(p: &mut Pipeline<u32>, bytes: &[u8]) -> Result<Vec<String>, Broken> {
        p.input().extend_from_slice(bytes);
        let mut events = Vec::new();
        p.receive(&mut events)?;
        Ok(events
            .into_iter()
            .filter(|e| !matches!(e, Event::Step { .. }))
            .map(|e| match e {
                Event::Step { .. } => unreachable!("filtered out"),
                Event::Ready => "ready".to_owned(),
                Event::Push(frame) => format!("push={frame:?}"),
                Event::Clock(ms) => format!("clock={ms}"),
                Event::Answered {
                    on_reply,
                    reply: Ok(frame),
                    ..
                } => format!("{on_reply:?}={frame:?}"),
                Event::Answered {
                    on_reply,
                    reply: Err(e),
                    ..
                } => format!("{on_reply:?}!{e}"),
            })
            .collect())
    }

    /// A script call whose `EVAL` is given.
    struct Script(Vec<u8>);

    impl Resendable for Script {
        fn bytes(&self) -> &[u8] {
            b"EVALSHA"
        }

        fn on_noscript(&self) -> Option<Vec<u8>> {
            Some(self.0.clone())
        }
    }

    fn open_pipeline() -> Pipeline<u32> {
        let mut p = Pipeline::default();
        p.open(&handshake(), 100, Sent::default);
        assert_eq!(
            feed(&mut p, b"+OK\r\n$40\r\n").unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(
            feed(&mut p, b"e0e1f9fabfc9d4800c877a703b823ac0578ff831\r\n").unwrap(),
            ["ready"]
        );
        p
    }

    #[test]
    fn the_handshake_goes_out_first_and_ready_follows_its_last_reply() {
        let mut p: Pipeline<u32> = Pipeline::default();
        p.open(&handshake(), 100, Sent::default);
        p.push(b"*1\r\n$4\r\nPING\r\n", Slot::request(150, 1, None));
        let expected: Vec<u8> = handshake()
            .into_iter()
            .flat_map(|(_, c)| c)
            .chain(b"*1\r\n$4\r\nPING\r\n".iter().copied())
            .collect();
        assert_eq!(p.output(), &expected[..]);
        assert_eq!(
            feed(&mut p, b"+OK\r\n$1\r\nx\r\n:1\r\n").unwrap(),
            ["ready", "Some(1)=Integer(1)"]
        );
    }

    #[test]
    fn only_a_command_behind_the_handshake_is_awaited_not_the_handshake_alone() {
        let mut p: Pipeline<u32> = Pipeline::default();
        assert!(!p.awaits_commands(), "idle");
        p.open(&handshake(), 100, Sent::default);
        assert!(!p.awaits_commands(), "the handshake alone");
        p.push(b"*1\r\n$4\r\nPING\r\n", Slot::request(150, 1, None));
        assert!(p.awaits_commands(), "a command behind it");
        feed(&mut p, b"+OK\r\n$1\r\nx\r\n").unwrap();
        assert!(
            p.awaits_commands(),
            "the handshake answered, the command not"
        );
        feed(&mut p, b":1\r\n").unwrap();
        assert!(!p.awaits_commands(), "all answered");
    }

    #[test]
    fn every_command_is_stamped_when_queued_and_its_stamp_comes_back_with_the_reply() {
        let mut p: Pipeline<u32> = Pipeline::default();
        let stamped = core::cell::Cell::new(0);
        p.open(&handshake(), 100, || {
            stamped.set(stamped.get() + 1);
            Sent::default()
        });
        assert_eq!(stamped.get(), handshake().len());
        let mut request = Slot::request(150, 1, None);
        request.sent = Sent::default();
        p.push(b"*1\r\n$4\r\nPING\r\n", request);
        p.input().extend_from_slice(b"+OK\r\n$1\r\nx\r\n:1\r\n");
        let mut events = Vec::new();
        p.receive(&mut events).unwrap();
        let stamps: Vec<String> = events
            .iter()
            .filter_map(|e| match e {
                Event::Step { sent } | Event::Answered { sent, .. } => Some(format!("{sent:?}")),
                Event::Ready | Event::Push(_) | Event::Clock(_) => None,
            })
            .collect();
        assert_eq!(stamps.len(), handshake().len() + 1);
    }

    #[test]
    fn the_handshakes_time_tells_redis_clock_and_a_script_call_is_stamped_as_queued() {
        let mut p: Pipeline<u32> = Pipeline::default();
        p.open(&[(CLOCK_STEP, command(&[b"TIME"]))], 100, Sent::default);
        assert_eq!(
            feed(&mut p, b"*2\r\n$10\r\n1765000000\r\n$6\r\n250999\r\n").unwrap(),
            ["clock=1765000000250", "ready"]
        );
        let mut call = crate::redis::script_call::ScriptCall::new("s", 0, 1);
        call.deadline();
        let (call, _) = call.finish();
        let mut slot = Slot::request(150, 1, None);
        slot.redis_deadline = Some(1_765_000_000_399);
        p.push(&call, slot);
        assert!(p.output().ends_with(b"$13\r\n1765000000399\r\n"));
        // Without a deadline (no offset yet): sent as built.
        p.push(&call, Slot::request(150, 2, None));
        assert!(p.output().ends_with(b"$13\r\n0000000000000\r\n"));
        // A proxy that refuses TIME: ready all the same, no clock learnt.
        let mut p: Pipeline<u32> = Pipeline::default();
        p.open(&[(CLOCK_STEP, command(&[b"TIME"]))], 100, Sent::default);
        assert_eq!(
            feed(&mut p, b"-ERR unknown command 'TIME'\r\n").unwrap(),
            ["ready"]
        );
    }

    #[test]
    fn a_role_step_that_is_not_master_breaks_the_connection() {
        let role = vec![(ROLE_STEP, command(&[b"ROLE"]))];
        let mut p: Pipeline<u32> = Pipeline::default();
        p.open(&role, 100, Sent::default);
        assert_eq!(
            feed(&mut p, b"*2\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n"),
            Err(Broken::Handshake(
                "ROLE: not the master (it is a slave)".to_owned()
            ))
        );
        let mut p: Pipeline<u32> = Pipeline::default();
        p.open(&role, 100, Sent::default);
        assert_eq!(
            feed(&mut p, b"*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n").unwrap(),
            ["ready"]
        );
    }

    #[test]
    fn a_subscribed_connection_delivers_messages_nobody_asked_for() {
        let subscribe = vec![("SUBSCRIBE", command(&[b"SUBSCRIBE", b"ch"]))];
        let mut p: Pipeline<u32> = Pipeline::subscriber();
        p.open(&subscribe, 100, Sent::default);
        assert_eq!(
            feed(&mut p, b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n").unwrap(),
            ["ready"]
        );
        let out = feed(&mut p, b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n").unwrap();
        assert_eq!(out.len(), 1);
        assert!(out[0].starts_with("push="), "{out:?}");
        assert!(p.is_idle());
        let mut plain: Pipeline<u32> = Pipeline::default();
        assert!(
            feed(&mut plain, b"+x\r\n").is_err(),
            "not subscribed: unasked"
        );
    }

    #[test]
    fn a_refused_handshake_breaks_the_connection_with_its_label() {
        let mut p: Pipeline<u32> = Pipeline::default();
        p.open(&handshake(), 100, Sent::default);
        assert_eq!(
            feed(&mut p, b"-WRONGPASS invalid username-password pair\r\n"),
            Err(Broken::Handshake(
                "AUTH failed: WRONGPASS invalid username-password pair".to_owned()
            ))
        );
    }

    #[test]
    fn a_broken_connection_reads_nothing_more_until_reopened() {
        let mut p: Pipeline<u32> = Pipeline::default();
        p.open(&handshake(), 100, Sent::default);
        p.push(b"", Slot::request(200, 1, None));
        let refused = Err(Broken::Handshake("AUTH failed: WRONGPASS x".to_owned()));
        assert_eq!(feed(&mut p, b"-WRONGPASS x\r\n"), refused);
        // The rest of the handshake and a reply arrive: not trusted.
        assert_eq!(feed(&mut p, b"$1\r\nx\r\n:1\r\n"), refused);
        assert_eq!(p.abandon(), (1, vec![1]));
        p.open(&handshake(), 100, Sent::default);
        assert_eq!(feed(&mut p, b"+OK\r\n$1\r\nx\r\n").unwrap(), ["ready"]);
    }

    #[test]
    fn a_fragmented_reply_is_delivered_once_complete() {
        let mut p = open_pipeline();
        p.push(b"", Slot::request(200, 7, None));
        let reply = b"*2\r\n:1\r\n:42\r\n";
        for byte in &reply[..reply.len() - 1] {
            assert_eq!(feed(&mut p, &[*byte]).unwrap(), Vec::<String>::new());
        }
        assert_eq!(
            feed(&mut p, b"\n").unwrap(),
            ["Some(7)=Array([Integer(1), Integer(42)])"]
        );
        assert!(p.is_idle());
    }

    #[test]
    fn pipelined_replies_go_to_their_slots_in_order() {
        let mut p = open_pipeline();
        for id in 1..=3 {
            p.push(b"", Slot::request(200, id, None));
        }
        assert_eq!(
            feed(&mut p, b":1\r\n:2\r\n:3").unwrap(),
            ["Some(1)=Integer(1)", "Some(2)=Integer(2)"]
        );
        assert_eq!(feed(&mut p, b"\r\n").unwrap(), ["Some(3)=Integer(3)"]);
    }

    #[test]
    fn an_error_reply_fails_only_its_own_slot() {
        let mut p = open_pipeline();
        p.push(b"", Slot::request(200, 1, None));
        p.push(b"", Slot::request(200, 2, None));
        assert_eq!(
            feed(&mut p, b"-WRONGTYPE Operation against a key\r\n:5\r\n").unwrap(),
            [
                "Some(1)!WRONGTYPE Operation against a key",
                "Some(2)=Integer(5)"
            ]
        );
    }

    #[test]
    fn noscript_resends_as_eval_and_the_slot_gets_the_second_reply() {
        let mut p = open_pipeline();
        p.sent(p.output().len());
        let eval = command(&[b"EVAL", b"return 1", b"0"]);
        let resend = Script(eval.clone());
        p.push(b"EVALSHA", Slot::request(200, 9, Some(Rc::new(resend))));
        p.sent(p.output().len());
        assert_eq!(
            feed(&mut p, b"-NOSCRIPT No matching script.\r\n").unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(p.output(), &eval[..]);
        assert_eq!(feed(&mut p, b":1\r\n").unwrap(), ["Some(9)=Integer(1)"]);
    }

    #[test]
    fn noscript_after_asking_resends_asking_then_eval_and_only_the_eval_is_answered() {
        let mut p = open_pipeline();
        p.sent(p.output().len());
        let eval = command(&[b"EVAL", b"return 1", b"0"]);
        let resend = Script(eval.clone());
        p.push(b"ASKING", Slot::request(200, 8, None));
        p.push(
            b"EVALSHA",
            Slot::request(200, 9, Some(Rc::new(resend))).after_asking(),
        );
        p.sent(p.output().len());
        assert_eq!(
            feed(&mut p, b"+OK\r\n-NOSCRIPT No matching script.\r\n").unwrap(),
            ["Some(8)=SimpleString([79, 75])"]
        );
        assert_eq!(p.output(), [ASKING, &eval[..]].concat());
        assert_eq!(
            feed(&mut p, b"+OK\r\n:1\r\n").unwrap(),
            ["Some(9)=Integer(1)"],
            "the pipeline's own ASKING is nobody's"
        );
    }

    #[test]
    fn noscript_twice_is_an_error_reply_not_a_loop() {
        let mut p = open_pipeline();
        p.push(
            b"",
            Slot::request(200, 4, Some(Rc::new(Script(b"EVAL".to_vec())))),
        );
        assert_eq!(
            feed(&mut p, b"-NOSCRIPT x\r\n-NOSCRIPT x\r\n").unwrap(),
            ["Some(4)!NOSCRIPT x"]
        );
    }

    #[test]
    fn noscript_to_a_plain_command_is_its_error_reply_and_nothing_is_resent() {
        let mut p = open_pipeline();
        p.sent(p.output().len());
        let plain: Resend = Rc::new(b"GET k".to_vec());
        assert_eq!(plain.bytes(), b"GET k");
        p.push(plain.bytes(), Slot::request(200, 5, Some(plain.clone())));
        p.sent(p.output().len());
        assert_eq!(
            feed(&mut p, b"-NOSCRIPT x\r\n").unwrap(),
            ["Some(5)!NOSCRIPT x"]
        );
        assert!(p.output().is_empty());
    }

    #[test]
    fn the_cluster_map_may_nest_where_other_replies_may_not() {
        let map = b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n";
        let mut p = open_pipeline();
        p.push(b"", Slot::topology(200, 1));
        assert_eq!(feed(&mut p, map).unwrap().len(), 1);
        p.push(b"", Slot::request(200, 2, None));
        assert!(feed(&mut p, map).is_err());
    }

    #[test]
    fn a_reply_nobody_asked_for_breaks_the_connection() {
        let mut p = open_pipeline();
        assert_eq!(
            feed(&mut p, b":1\r\n"),
            Err(Broken::Protocol("a reply nobody asked for".to_owned()))
        );
    }

    #[test]
    fn after_a_reply_nobody_asked_for_the_next_reply_is_not_read() {
        // Found by fuzz/fuzz_targets/redis_pipeline.rs.
        let mut p = open_pipeline();
        let unsolicited = Err(Broken::Protocol("a reply nobody asked for".to_owned()));
        assert_eq!(feed(&mut p, b":1\r\n"), unsolicited);
        p.push(b"", Slot::request(200, 1, None));
        assert_eq!(feed(&mut p, b":2\r\n"), unsolicited);
    }

    #[test]
    fn a_corrupt_stream_breaks_the_connection() {
        let mut p = open_pipeline();
        p.push(b"", Slot::request(200, 1, None));
        assert!(feed(&mut p, b"HTTP/1.1 400 Bad Request\r\n").is_err());
    }

    #[test]
    fn abandoning_returns_every_waiting_request_but_not_the_handshake() {
        let mut p: Pipeline<u32> = Pipeline::default();
        p.open(&handshake(), 100, Sent::default);
        p.push(b"x", Slot::request(200, 1, None));
        p.push(b"y", Slot::request(200, 2, None));
        assert_eq!(p.abandon(), (2, vec![1, 2]));
        assert!(p.is_idle() && p.output().is_empty());
    }

    #[test]
    fn the_oldest_slot_holds_the_deadline_to_watch() {
        let mut p: Pipeline<u32> = Pipeline::default();
        p.open(&handshake(), 100, Sent::default);
        assert!(p
            .oldest()
            .is_some_and(|s| s.deadline == 100 && s.is_handshake()));
    }
}

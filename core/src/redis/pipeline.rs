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
use super::command::{
    decode_reply_in, decode_topology, is_noscript, Decoded, Frame, Rooms, MAX_REPLY,
};
use super::sentinel;
use crate::metrics::Sent;

mod stamp;

use stamp::LastStamp;

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

/// What a command got.
#[derive(Debug, PartialEq)]
pub enum Reply {
    /// Its reply (a script's integers held inline).
    Frame(Frame),
    /// An error reply's text (Redis is up but refused this one command:
    /// only its request fails).
    Error(String),
    /// Timeout, disconnect or shutdown: Redis failed (never a reply read:
    /// what the connection answers a slot it gives up).
    Failed,
}

impl Reply {
    /// The reply if Redis answered without error.
    pub fn frame(&self) -> Option<&Frame> {
        match self {
            Reply::Frame(frame) => Some(frame),
            Reply::Error(_) | Reply::Failed => None,
        }
    }
}

/// What a reply did.
pub enum Event<R> {
    /// A request's reply: a frame or an error reply's text (never
    /// `Reply::Failed`), made once where the read hands it on (measured:
    /// each move of a script's integers from one type to another was a
    /// copy of them).
    Answered {
        on_reply: Option<R>,
        reply: Reply,
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
    /// Input read into events already (dropped from `input` once no
    /// complete reply is left: `next_event`).
    used: usize,
    /// Events of a reply that made several (a handshake step's), not
    /// handed on yet, the next last.
    later: Vec<Event<R>>,
    /// A `SUBSCRIBE`d connection: replies nobody waits for are messages.
    subscriber: bool,
    /// The boxes of script answers handed on, given back once read
    /// ([`Pipeline::give_back`]): the next are read into them.
    rooms: Rooms,
    /// The deadline last stamped on a call, whose digits the next takes.
    last_stamp: LastStamp,
}

impl<R> Default for Pipeline<R> {
    fn default() -> Self {
        Pipeline {
            out: Vec::with_capacity(4096),
            input: Vec::with_capacity(READ_CHUNK),
            slots: VecDeque::new(),
            broken: None,
            used: 0,
            later: Vec::new(),
            subscriber: false,
            rooms: Rooms::default(),
            last_stamp: LastStamp::default(),
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
        self.forget_input();
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
            self.last_stamp.stamp(&mut self.out[at..], deadline);
        }
        self.slots.push_back(slot);
    }

    /// A reply handed on has been read: its box, if it has one, holds a
    /// later one.
    pub fn give_back(&mut self, reply: Reply) {
        if let Reply::Frame(frame) = reply {
            self.rooms.give_back(frame);
        }
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
        self.forget_input();
        let requests = self.slots.iter().filter(|s| !s.is_handshake()).count();
        let failed = self.slots.drain(..).filter_map(|s| s.on_reply).collect();
        (requests, failed)
    }

    /// The bytes of the old connection and what was read of them.
    fn forget_input(&mut self) {
        self.out.clear();
        self.input.clear();
        self.broken = None;
        self.used = 0;
        self.later.clear();
    }

    /// Matches every complete reply in the input to its slot, in order,
    /// appending what happened to `events`. Once it fails, it fails the
    /// same way until the connection is reopened or abandoned.
    pub fn receive(&mut self, events: &mut Vec<Event<R>>) -> Result<(), Broken> {
        while let Some(event) = self.next_event()? {
            events.push(event);
        }
        Ok(())
    }

    /// What the next complete reply in the input did (matched to its slot,
    /// in order), or `None` once no complete reply is left: what `receive`
    /// appends, one at a time (measured: gathered into a list first, some
    /// 90 instructions a read more). Once it fails, it fails the same way
    /// until the connection is reopened or abandoned.
    pub fn next_event(&mut self) -> Result<Option<Event<R>>, Broken> {
        if let Some(event) = self.later.pop() {
            return Ok(Some(event));
        }
        if let Some(broken) = &self.broken {
            return Err(broken.clone());
        }
        let result = self.read_event();
        let result = match result {
            Ok(Some(event)) => return Ok(Some(event)),
            Ok(None) => {
                self.input
                    .drain(..core::mem::take(&mut self.used).min(self.input.len()));
                match self.input.len() > MAX_INPUT {
                    true => Err(Broken::Protocol("reply too large".to_owned())),
                    false => return Ok(None),
                }
            }
            Err(broken) => {
                self.input
                    .drain(..core::mem::take(&mut self.used).min(self.input.len()));
                Err(broken)
            }
        };
        if let Err(broken) = &result {
            self.broken = Some(broken.clone());
        }
        result
    }

    /// Reads replies from `used` on until one makes an event (a reply of
    /// the pipeline's own makes none), or none is complete.
    fn read_event(&mut self) -> Result<Option<Event<R>>, Broken> {
        loop {
            let topology = self.slots.front().is_some_and(|s| s.topology);
            let input = self.input.get(self.used..).unwrap_or_default();
            // Nothing left (every read ends so): no reply, without a call.
            if input.is_empty() {
                return Ok(None);
            }
            let decoded = if topology {
                decode_topology(input)
            } else {
                decode_reply_in(input, &mut self.rooms)
            };
            let frame = match decoded {
                Decoded::Frame(frame, n) => {
                    self.used += n;
                    frame
                }
                Decoded::Partial => return Ok(None),
                Decoded::Corrupt(why) => {
                    return Err(Broken::Protocol(format!("unreadable reply: {why}")))
                }
            };
            let Some(mut slot) = self.slots.pop_front() else {
                if self.subscriber {
                    return Ok(Some(Event::Push(frame.into_owned())));
                }
                return Err(Broken::Protocol("a reply nobody asked for".to_owned()));
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
                return self
                    .handshake_step(label, &frame.as_owned(), slot.sent)
                    .map(Some);
            }
            let reply = match frame {
                Frame::Other(OwnedFrame::Error(e)) => Reply::Error(e),
                frame => Reply::Frame(frame),
            };
            return Ok(Some(Event::Answered {
                on_reply: slot.on_reply.take(),
                reply,
                sent: slot.sent,
                deadline: slot.deadline,
            }));
        }
    }

    /// A handshake step's reply (`label`'s, its command queued at
    /// `sent`): its first event; the others it made wait in `later`.
    fn handshake_step(
        &mut self,
        label: &'static str,
        frame: &OwnedFrame,
        sent: Sent,
    ) -> Result<Event<R>, Broken> {
        match frame {
            // A proxy that refuses TIME: calls go without a deadline
            // (`clock`), as before the first answer.
            OwnedFrame::Error(_) if label == CLOCK_STEP => {}
            OwnedFrame::Error(e) => {
                return Err(Broken::Handshake(format!("{label} failed: {e}")));
            }
            _ => {}
        }
        if label == ROLE_STEP && !sentinel::is_master(frame) {
            let role = sentinel::role(frame);
            return Err(Broken::Handshake(format!(
                "ROLE: not the master (it is a {role})"
            )));
        }
        // (Last first: `next_event` takes them from the end.)
        if self.slots.iter().all(|s| !s.is_handshake()) {
            self.later.push(Event::Ready);
        }
        let step = Event::Step { sent };
        let clock = match label == CLOCK_STEP {
            true => clock::time_ms(frame),
            false => None,
        };
        match clock {
            Some(ms) => {
                self.later.push(step);
                Ok(Event::Clock(ms))
            }
            None => Ok(step),
        }
    }
}

#[cfg(test)]
mod tests;

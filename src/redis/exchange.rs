//! What goes over one connection and what it shows of Redis, without the
//! socket: the pipeline of commands and replies (`pipeline`), the cap on
//! commands in flight, error replies logged once per kind and episode, and
//! Redis's health as its answers show it (`health`), reported in the
//! fallback gauge. `connection` moves the bytes and acts on what this
//! decides; this never touches nginx's events.

use core::sync::atomic::Ordering;
use std::rc::Weak;

use nginx_sys::{ngx_log_t, ngx_msec_t};

use super::now;
use super::settings::Settings;
use crate::shm::health::Peer;
use pow_shield_core::metrics::{self, RedisError};
use pow_shield_core::redis::clock::RedisClock;
use pow_shield_core::redis::cluster::parse_redirect;
use pow_shield_core::redis::command::{error_kind, Frame};
use pow_shield_core::redis::health::{
    Admission, Availability, ErrorReplies, Failure, Follow, InFlight, NodeHealth,
};
use pow_shield_core::redis::pipeline::{Broken, Event, Pipeline, Slot};

/// The most room a list kept between reads holds on to.
pub(super) const KEPT_ROOM: usize = 256;

/// Commands in flight per worker. nginx handles at most 512 events per
/// loop iteration (epoll's default `events`), each starting at most one
/// command, so this is two iterations' worth: a healthy Redis answers far
/// sooner, and a Redis that lets this many wait would make them wait for
/// the timeout anyway. Beyond it requests are decided by pow_shield_fail.
pub const MAX_IN_FLIGHT: usize = 1024;

/// What a slot's owner gets: the reply, lent (it stays in the read's
/// list: handed on by reference, a script's integers held inline are not
/// copied from layer to layer).
pub enum OnReply {
    /// Nobody waits (an `ASKING`, a probe's `PING`).
    Nobody,
    Call(Box<dyn FnOnce(&Reply)>),
    /// A request's command: its frame, or `None` for an error reply or a
    /// failure (no box made a command).
    Frame(OnFrame),
    /// Command `id` of `who`, which gets the reply whole, if it is still
    /// there (a Redis Cluster's job: no box made a command).
    Of(Weak<dyn Replies>, u32),
}

impl OnReply {
    pub fn run(self, reply: &Reply) {
        match self {
            OnReply::Nobody => {}
            OnReply::Call(f) => f(reply),
            OnReply::Frame(to) => to.deliver(reply.frame()),
            OnReply::Of(who, id) => {
                if let Some(who) = who.upgrade() {
                    who.replied(id, reply);
                }
            }
        }
    }
}

/// What holds several commands, each by its number, and gets each reply
/// whole (a Redis Cluster: its jobs, which a redirection sends on).
pub trait Replies {
    fn replied(&self, id: u32, reply: &Reply);
}

/// What a command's sender gets: the reply, or `None` if Redis failed it
/// (or refused it).
pub enum OnFrame {
    Call(FrameCall),
    /// Command `id` of `who`, if it is still there (no box made a command).
    Of(Weak<dyn Awaits>, u64),
}

/// A command's own callback: its reply, lent, or `None`.
pub type FrameCall = Box<dyn FnOnce(Option<&Frame>)>;

impl OnFrame {
    /// (Inline where a reply is handed on: measured, some 35 instructions
    /// a request less in a Redis Cluster.)
    #[inline(always)]
    pub fn deliver(self, frame: Option<&Frame>) {
        match self {
            OnFrame::Call(f) => f(frame),
            OnFrame::Of(who, id) => {
                if let Some(who) = who.upgrade() {
                    who.answered(id, frame);
                }
            }
        }
    }
}

/// What waits for several commands' replies, each by its number (the
/// Redis store, its calls by id).
pub trait Awaits {
    fn answered(&self, id: u64, frame: Option<&Frame>);
}

/// What a command's reply goes to, made into its slot's `OnReply` only
/// once the command is queued: a command refused at once gives it back
/// whole (a Redis Cluster's job, to go elsewhere or fail), nothing made
/// for it.
pub trait Pending {
    fn on_reply(self) -> OnReply;
}

impl Pending for OnReply {
    fn on_reply(self) -> OnReply {
        self
    }
}

/// What a command got (the one type of it: core's).
pub use pow_shield_core::redis::pipeline::Reply;

/// Why a submission was refused (the one type of it: core's).
pub use pow_shield_core::redis::Unavailable;

/// Up to 200 characters of a peer's text, control characters replaced.
pub(super) fn printable(text: &str) -> String {
    text.chars()
        .take(200)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// One connection's commands, replies and health.
pub(super) struct Exchange {
    pub(super) pipeline: Pipeline<OnReply>,
    /// Redis answered the last handshake; while not, submissions are
    /// refused and only reconnect probes talk to Redis.
    health: Availability,
    /// Request slots in the pipeline, capped.
    in_flight: InFlight,
    errors: ErrorReplies,
    /// The node's word on this Redis (in the zone: its workers share it),
    /// and the epoch of it this worker last followed or wrote.
    node: Option<&'static Peer>,
    node_seen: u64,
    /// Redis's clock as this connection last learnt it: a script call
    /// carries its deadline in it (`clock`), kept across reconnects.
    clock: RedisClock,
    shutting_down: bool,
    /// Requests depend on this node: always with a single Redis; in a
    /// Redis Cluster, while the map gives it slots (a seed or a former
    /// master that owns none is not what the fallback gauge reports).
    serving: bool,
    /// This connection counts 1 in the fallback gauge now.
    in_gauge: bool,
    /// A handshake succeeded: `on_ready` runs once the state is released.
    ready: bool,
    /// The worker's log, for our own lines.
    log: *mut ngx_log_t,
    /// After an outage: the deadline of the `PING` that `dispatch` queues
    /// once the read's replies are handed on (`connected`).
    probe: Option<u64>,
}

impl Exchange {
    /// `subscriber`: the handshake subscribes (messages are pushed);
    /// `node`: the node's word on this Redis.
    pub(super) fn new(
        subscriber: bool,
        node: Option<&'static Peer>,
        log: *mut ngx_log_t,
    ) -> Exchange {
        Exchange {
            pipeline: if subscriber {
                Pipeline::subscriber()
            } else {
                Pipeline::default()
            },
            health: Availability::default(),
            in_flight: InFlight::new(MAX_IN_FLIGHT),
            errors: ErrorReplies::default(),
            node,
            node_seen: 0,
            clock: RedisClock::default(),
            shutting_down: false,
            serving: true,
            in_gauge: false,
            ready: false,
            log,
            probe: None,
        }
    }

    /// What this worker does about a change of the node's word on Redis
    /// that it has not followed yet (`Availability::follow`).
    #[inline(always)]
    pub(super) fn follow_node(&mut self) -> Follow {
        let Some(peer) = self.node else {
            return Follow::Stay;
        };
        let node = NodeHealth::from_word(peer.word.load(Ordering::Acquire));
        let follow = self.health.follow(node, self.node_seen);
        self.node_seen = node.epoch();
        follow
    }

    /// Whether an unpaid refusal counts a strike now: not within a grace
    /// after this worker or its node came back (`strikes_unpaid`).
    #[inline]
    pub(super) fn strikes_unpaid(&self) -> bool {
        let node_back = self
            .node
            .map(|peer| peer.back_ms.load(Ordering::Acquire))
            .filter(|ms| *ms > 0);
        self.health.strikes_unpaid(now() as u64, node_back)
    }

    /// Another worker found Redis back: this one returns now, on
    /// probation.
    pub(super) fn rejoin(&mut self) {
        self.health.rejoin();
        self.update_gauge();
    }

    /// This worker found Redis down (`found_down`) or back: the node's word
    /// says so, unless it does already (another worker was first).
    fn tell_node(&mut self, change: fn(NodeHealth) -> Option<NodeHealth>) {
        let Some(peer) = self.node else {
            return;
        };
        let word = &peer.word;
        let mut now = word.load(Ordering::Acquire);
        loop {
            let Some(next) = change(NodeHealth::from_word(now)) else {
                self.node_seen = NodeHealth::from_word(now).epoch();
                return;
            };
            match word.compare_exchange(now, next.word(), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.node_seen = next.epoch();
                    return;
                }
                Err(other) => now = other,
            }
        }
    }

    /// Whether commands may be sent: Redis is up (or on probation after an
    /// outage) and the worker stays.
    pub(super) fn admits(&self) -> bool {
        self.health.admits() && !self.shutting_down
    }

    /// Redis answered the last handshake.
    pub(super) fn is_healthy(&self) -> bool {
        self.health.is_healthy()
    }

    /// Down, with a reconnect attempt to come (not a worker that exits).
    pub(super) fn is_down(&self) -> bool {
        !self.health.admits() && !self.shutting_down
    }

    pub(super) fn is_shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// The worker is leaving: nothing is sent or retried any more.
    pub(super) fn shut_down(&mut self) {
        self.shutting_down = true;
        self.update_gauge();
    }

    /// Whether requests depend on this node (see `serving`).
    pub(super) fn set_serving(&mut self, serving: bool) {
        self.serving = serving;
        self.update_gauge();
    }

    /// The handshake succeeded since last asked.
    pub(super) fn take_ready(&mut self) -> bool {
        core::mem::take(&mut self.ready)
    }

    /// Room for `together` request commands, queued together or not at all.
    pub(super) fn admit(&mut self, together: usize, s: &Settings) -> Result<(), Unavailable> {
        if let Admission::Refused { first } = self.in_flight.admit_together(together) {
            metrics::redis_error(RedisError::Refused);
            if first {
                error!(
                    self.log,
                    "pow_shield: redis {}: {MAX_IN_FLIGHT} commands in flight; further \
                     requests are decided by the zone's limiter until half of them \
                     are answered",
                    s.name
                );
            }
            return Err(Unavailable::Busy);
        }
        Ok(())
    }

    /// Room for `CLUSTER SLOTS`, counted like any command.
    pub(super) fn admit_topology(&mut self) -> Result<(), Unavailable> {
        if self.in_flight.admit() != Admission::Admitted {
            return Err(Unavailable::Busy);
        }
        Ok(())
    }

    /// Queues a command for the next flush; a script call goes with its
    /// deadline in Redis's clock.
    pub(super) fn push(&mut self, command: &[u8], mut slot: Slot<OnReply>) {
        slot.sent = metrics::redis_command();
        slot.redis_deadline = self.clock.deadline(slot.deadline);
        self.pipeline.push(command, slot);
    }

    /// Hands complete replies to their slots (their callbacks into
    /// `ready`, to run once the state is released); `Err`: the connection
    /// failed, with why.
    pub(super) fn dispatch(
        &mut self,
        s: &Settings,
        ready: &mut Vec<(OnReply, Reply)>,
    ) -> Result<(), (RedisError, String)> {
        // What was answered before a fault is still delivered.
        let received = loop {
            match self.pipeline.next_event() {
                Ok(Some(event)) => self.handle(event, s, ready),
                Ok(None) => break Ok(()),
                Err(broken) => break Err(broken),
            }
        };
        // (After what this read sent again: Redis lost a script.)
        if let Some(deadline) = self.probe.take() {
            let mut ping = Vec::new();
            pow_shield_core::redis::command::encode(&mut ping, &[b"PING"]);
            self.push(&ping, Slot::request(deadline, OnReply::Nobody, None));
        }
        received.map_err(|broken| match broken {
            Broken::Protocol(why) => (RedisError::Protocol, why),
            Broken::Handshake(why) => (RedisError::Handshake, why),
        })
    }

    /// What a reply did: its callback into `ready`, to run once the state
    /// is released.
    fn handle(&mut self, event: Event<OnReply>, s: &Settings, ready: &mut Vec<(OnReply, Reply)>) {
        match event {
            Event::Step { sent } => metrics::redis_reply(sent),
            Event::Ready => self.connected(s),
            Event::Clock(redis_ms) => self.clock.learn(redis_ms, now() as u64),
            Event::Push(frame) => {
                if let Some(on_push) = &s.on_push {
                    let on_push = on_push.clone();
                    let deliver = OnReply::Call(Box::new(move |reply: &Reply| {
                        if let Reply::Frame(Frame::Other(frame)) = reply {
                            on_push(frame);
                        }
                    }));
                    ready.push((deliver, Reply::Frame(Frame::Other(frame))));
                }
            }
            Event::Answered {
                on_reply,
                reply,
                sent,
                deadline,
            } => {
                metrics::redis_reply(sent);
                self.answered(1, s);
                self.recovered(deadline, s);
                match &reply {
                    Reply::Frame(frame) => {
                        if let Some(redis_ms) = frame.expired_ms() {
                            // Came after its deadline (Redis's clock
                            // stepped, or it answered at the last ms):
                            // its request falls back; the clock is
                            // learnt again.
                            self.clock.learn(redis_ms, now() as u64);
                            debug!(
                                self.log,
                                "pow_shield: redis {} ran a call after its deadline", s.name
                            );
                        }
                        if self.errors.on_success(now() as u64) {
                            notice!(
                                self.log,
                                "pow_shield: redis {} answers without error replies again",
                                s.name
                            );
                        }
                    }
                    Reply::Error(text) => {
                        if !(s.cluster && parse_redirect(text).is_some()) {
                            self.error_reply(text, s);
                        }
                    }
                    Reply::Failed => {}
                }
                if let Some(on_reply) = on_reply {
                    ready.push((on_reply, reply));
                }
            }
        }
    }

    /// The connection is gone: every slot's callback, to be failed.
    pub(super) fn abandon(&mut self, s: &Settings) -> Vec<OnReply> {
        let (requests, failed) = self.pipeline.abandon();
        self.answered(requests, s);
        failed
    }

    /// The connection failed (and is closed): logs the transition once per
    /// outage; returns the back-off before the next attempt.
    pub(super) fn failed(&mut self, reason: &str, s: &Settings) -> u64 {
        let (failure, backoff_ms) = self.health.failed(now() as u64);
        if failure == Failure::Started {
            self.tell_node(NodeHealth::found_down);
        }
        // An outage of this peer that an earlier connection logged.
        let known =
            failure == Failure::Started && s.outage.as_ref().is_some_and(|o| o.replace(true));
        if failure == Failure::Started && !known {
            self.update_gauge();
            // A sentinel's outage decides no request: the next one is asked.
            let meaning = if s.outage.is_some() {
                "the other sentinels are asked"
            } else {
                "requests are decided by \"pow_shield_fail\" until it recovers"
            };
            error!(
                self.log,
                "pow_shield: redis {} unavailable ({reason}); {meaning}", s.name
            );
        } else {
            if known {
                self.update_gauge();
            }
            debug!(
                self.log,
                "pow_shield: redis {} still unavailable ({reason})", s.name
            );
        }
        backoff_ms
    }

    /// An error reply to a request: logged once per kind and episode.
    fn error_reply(&mut self, text: &str, s: &Settings) {
        metrics::redis_error(RedisError::Reply);
        let kind = error_kind(text);
        if self.errors.on_error(kind, now() as u64) {
            error!(
                self.log,
                "pow_shield: redis {} answered {kind} errors; those requests are decided by \
                 \"pow_shield_fail\" (first: {})",
                s.name,
                printable(text)
            );
        }
    }

    /// `n` request slots left the queue.
    fn answered(&mut self, n: usize, s: &Settings) {
        if self.in_flight.done(n) {
            notice!(
                self.log,
                "pow_shield: redis {}: commands in flight back under the cap ({} refused \
                 since the worker started)",
                s.name,
                self.in_flight.refused()
            );
        }
    }

    /// The handshake succeeded. After an outage the connection is on
    /// probation: a `PING` with a request's deadline (and the requests
    /// meanwhile) shows whether Redis answers in time.
    fn connected(&mut self, s: &Settings) {
        self.ready = true;
        let after_outage = self.health.connected();
        if !after_outage && s.outage.as_ref().is_some_and(|o| o.replace(false)) {
            // A fresh connection to a peer an earlier one logged as down.
            notice!(self.log, "pow_shield: redis {} is available again", s.name);
        }
        if after_outage && self.in_flight.admit() == Admission::Admitted {
            // Queued once the read's replies are handed on (`dispatch`).
            self.probe = Some(now().wrapping_add(s.timeout_ms) as u64);
        }
    }

    /// A reply arrived: if in time, it ends an outage (logged once).
    fn recovered(&mut self, deadline: u64, s: &Settings) {
        let late = (now().wrapping_sub(deadline as ngx_msec_t) as i64) > 0;
        if !late && self.health.answered_in_time(now() as u64) {
            self.tell_node(NodeHealth::found_up);
            if let Some(peer) = self.node {
                peer.back_ms.fetch_max(now() as u64, Ordering::AcqRel);
            }
            metrics::redis_reconnected();
            self.update_gauge();
            if let Some(outage) = &s.outage {
                outage.set(false);
            }
            notice!(self.log, "pow_shield: redis {} is available again", s.name);
        }
    }

    /// Keeps the fallback gauge at "down and depended on" for this node.
    fn update_gauge(&mut self) {
        let down = self.serving && !self.health.is_healthy() && !self.shutting_down;
        if down != self.in_gauge {
            self.in_gauge = down;
            metrics::redis_fallback(down);
        }
    }
}

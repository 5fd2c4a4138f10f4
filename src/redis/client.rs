//! One persistent Redis connection per worker and node, driven by nginx's
//! event loop (docs/directives.md, "pow_shield_redis"). This is what
//! requests see of it: command submission and reply dispatch. The socket
//! is `connection`, the events nginx delivers are `events`; what the bytes
//! mean is in `pipeline`, what is logged and when to retry in `health`.
//! - commands of concurrent requests are appended to one buffer and sent by
//!   one posted flush per loop iteration (pipelining);
//! - replies are matched to waiting slots in order;
//! - an error reply (WRONGTYPE, READONLY, OOM...) fails only its own slot:
//!   the connection stays; each kind is logged once per episode;
//! - while Redis is down, or with `MAX_IN_FLIGHT` commands waiting, `submit`
//!   refuses at once (`Unavailable::Down`, `Unavailable::Busy`): requests
//!   never wait on a dead or drowning Redis.

use core::cell::{Cell, RefCell, UnsafeCell};
use core::ptr;
use std::rc::Rc;

use nginx_sys::{ngx_addr_t, ngx_connection_t, ngx_event_t, ngx_log_t, ngx_msec_t, ngx_ssl_t};
use redis_protocol::resp2::types::OwnedFrame;

use super::connection::{connection_log, Phase};
use super::events::idle_event;
use super::now;
pub use super::resolve::Resolve;
use super::resolve::{Answer, Resolved};
pub use super::tls::PeerName;
use pow_shield_core::metrics::{self, RedisError};
use pow_shield_core::redis::cluster::parse_redirect;
use pow_shield_core::redis::command::error_kind;
use pow_shield_core::redis::health::{Admission, Availability, ErrorReplies, InFlight};
pub use pow_shield_core::redis::pipeline::Resend;
use pow_shield_core::redis::pipeline::{Broken, Event, Pipeline, Slot};

/// Commands in flight per worker. nginx handles at most 512 events per
/// loop iteration (epoll's default `events`), each starting at most one
/// command, so this is two iterations' worth: a healthy Redis answers far
/// sooner, and a Redis that lets this many wait would make them wait for
/// the timeout anyway. Beyond it requests are decided by pow_shield_fail.
pub const MAX_IN_FLIGHT: usize = 1024;

/// What a slot's owner gets.
pub type OnReply = Box<dyn FnOnce(Reply)>;

/// What a command got.
pub enum Reply {
    Frame(OwnedFrame),
    /// An error reply's text (Redis refused this command only).
    Error(String),
    /// Timeout, disconnect or shutdown: Redis failed.
    Failed,
}

impl Reply {
    /// The reply if Redis answered without error.
    pub fn frame(self) -> Option<OwnedFrame> {
        match self {
            Reply::Frame(frame) => Some(frame),
            Reply::Error(_) | Reply::Failed => None,
        }
    }
}

/// How to reach Redis and what to say first on every new connection.
pub struct Settings {
    /// A copy of the resolved address (configuration pool memory).
    pub addr: ngx_addr_t,
    /// For log lines: `host:port` or `unix:/path`.
    pub name: String,
    pub timeout_ms: ngx_msec_t,
    pub connect_timeout_ms: ngx_msec_t,
    /// Encoded commands sent first on each connection (AUTH, SELECT, SCRIPT
    /// LOAD), with a label for the log if Redis refuses one.
    pub handshake: Vec<(&'static str, Vec<u8>)>,
    /// Runs after each connection's handshake succeeded (outside the
    /// client's state, so it may submit).
    pub on_ready: Option<Box<dyn Fn()>>,
    /// `rediss://`: TLS on every connection.
    pub tls: Option<Tls>,
    /// A Redis Cluster node: redirections (MOVED, ASK, TRYAGAIN) are for
    /// the router to follow, not errors to log.
    pub cluster: bool,
    /// A connection that subscribes in its handshake: each message goes
    /// here (outside the client's state).
    pub on_push: Option<Rc<dyn Fn(OwnedFrame)>>,
    /// A host name resolved at run time (`addr` is then not used).
    pub resolve: Option<Resolve>,
    /// A sentinel's connection (asked in turn with the others): requests
    /// do not depend on it, and this flag, shared by the connections that
    /// replace one another to that sentinel, says its outage is logged
    /// already. Each outage is then logged once, and its end once, not
    /// once per connection.
    pub outage: Option<Rc<Cell<bool>>>,
}

/// TLS settings of a connection.
pub struct Tls {
    /// The context built from the configuration (configuration pool).
    pub ssl: *mut ngx_ssl_t,
    /// Checked against the certificate and sent as SNI.
    pub name: PeerName,
    /// `tls_verify`: check the chain and the name.
    pub verify: bool,
}

pub(super) struct State {
    pub(super) conn: *mut ngx_connection_t,
    pub(super) phase: Phase,
    /// Redis answered the last handshake; while not, submissions are
    /// refused and only reconnect probes talk to Redis.
    pub(super) health: Availability,
    pub(super) pipeline: Pipeline<OnReply>,
    /// Request slots in the pipeline, capped.
    pub(super) in_flight: InFlight,
    pub(super) errors: ErrorReplies,
    pub(super) shutting_down: bool,
    /// Requests depend on this node: always with a single Redis; in a
    /// Redis Cluster, while the map gives it slots (a seed or a former
    /// master that owns none is not what the fallback gauge reports).
    pub(super) serving: bool,
    /// This connection counts 1 in the fallback gauge now.
    pub(super) in_gauge: bool,
}

impl State {
    /// Keeps the fallback gauge at "down and depended on" for this node.
    pub(super) fn update_gauge(&mut self) {
        let down = self.serving && !self.health.is_healthy() && !self.shutting_down;
        if down != self.in_gauge {
            self.in_gauge = down;
            metrics::redis_fallback(down);
        }
    }
}

/// The client. Boxed so that nginx's events can point at it.
pub struct Client(Box<Inner>);

pub(super) struct Inner {
    pub(super) settings: Settings,
    pub(super) state: RefCell<State>,
    /// nginx writes these (timers, posted flags) through raw pointers, so
    /// they live outside the RefCell.
    pub(super) flush_ev: UnsafeCell<ngx_event_t>,
    pub(super) deadline_ev: UnsafeCell<ngx_event_t>,
    pub(super) reconnect_ev: UnsafeCell<ngx_event_t>,
    /// The connection's own log: nginx's per-attempt connect errors are
    /// kept below `crit` so a dead Redis logs one line per transition.
    pub(super) log: UnsafeCell<ngx_log_t>,
    /// The worker's log, for our own lines.
    pub(super) cycle_log: *mut ngx_log_t,
    /// With TLS, the connection log's last line (OpenSSL's reason for a
    /// failure), quoted in ours instead of logged on every attempt.
    pub(super) last_error: RefCell<String>,
    /// A handshake succeeded: run `on_ready` once the state is released.
    pub(super) ready: Cell<bool>,
    /// With `Settings::resolve`: the address in use, the resolution in
    /// progress, its answer until applied, and whether a failure asks for
    /// a new one.
    pub(super) resolved: RefCell<Option<Resolved>>,
    pub(super) resolve_ctx: Cell<*mut nginx_sys::ngx_resolver_ctx_t>,
    pub(super) resolution: RefCell<Option<Answer>>,
    pub(super) re_resolve: Cell<bool>,
}

/// Why a submission was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// Redis is down (or the worker exits): `pow_shield_fail` decides.
    Down,
    /// `MAX_IN_FLIGHT` commands wait: back-pressure, not an outage. The
    /// request is decided by the zone, never passed uncounted.
    Busy,
}

impl Client {
    /// Creates the client and starts connecting.
    pub fn start(settings: Settings, cycle_log: *mut ngx_log_t) -> Client {
        let subscriber = settings.on_push.is_some();
        let inner = Box::new(Inner {
            settings,
            state: RefCell::new(State {
                conn: ptr::null_mut(),
                phase: Phase::Disconnected,
                health: Availability::default(),
                pipeline: if subscriber {
                    Pipeline::subscriber()
                } else {
                    Pipeline::default()
                },
                in_flight: InFlight::new(MAX_IN_FLIGHT),
                errors: ErrorReplies::default(),
                shutting_down: false,
                serving: true,
                in_gauge: false,
            }),
            flush_ev: idle_event(),
            deadline_ev: idle_event(),
            reconnect_ev: idle_event(),
            log: connection_log(cycle_log),
            cycle_log,
            last_error: RefCell::new(String::new()),
            ready: Cell::new(false),
            resolved: RefCell::new(None),
            resolve_ctx: Cell::new(ptr::null_mut()),
            resolution: RefCell::new(None),
            re_resolve: Cell::new(false),
        });
        inner.attach_events();
        let client = Client(inner);
        client.0.with_state(|inner, st| inner.connect(st));
        client
    }

    /// Queues one command; `on_reply` runs from the event loop with the
    /// reply, or with `None` on timeout, error reply or disconnect.
    /// Refused at once while Redis is down or `MAX_IN_FLIGHT` commands wait.
    pub fn submit(
        &self,
        command: &[u8],
        on_noscript: Option<Resend>,
        on_reply: OnReply,
    ) -> Result<(), Unavailable> {
        self.submit_after(None, command, on_noscript, on_reply)
    }

    /// `submit` preceded by `ASKING` (a Redis Cluster `ASK`): both are
    /// queued or neither, so that no lone ASKING applies to the next
    /// command on the connection.
    pub fn submit_asking(
        &self,
        command: &[u8],
        on_noscript: Option<Resend>,
        on_reply: OnReply,
    ) -> Result<(), Unavailable> {
        let mut asking = Vec::new();
        pow_shield_core::redis::command::encode(&mut asking, &[b"ASKING"]);
        self.submit_after(Some(&asking), command, on_noscript, on_reply)
    }

    fn submit_after(
        &self,
        before: Option<&[u8]>,
        command: &[u8],
        on_noscript: Option<Resend>,
        on_reply: OnReply,
    ) -> Result<(), Unavailable> {
        self.0
            .with_state(|inner, st| {
                inner.open_for_commands(st)?;
                let together = 1 + usize::from(before.is_some());
                if let Admission::Refused { first } = st.in_flight.admit_together(together) {
                    metrics::redis_error(RedisError::Refused);
                    if first {
                        error!(
                            inner.cycle_log,
                            "pow_shield: redis {}: {MAX_IN_FLIGHT} commands in flight; further \
                             requests are decided by the zone's limiter until half of them \
                             are answered",
                            inner.settings.name
                        );
                    }
                    return Err(Unavailable::Busy);
                }
                let deadline = now().wrapping_add(inner.settings.timeout_ms);
                if let Some(before) = before {
                    // Its reply (OK) is nobody's.
                    inner.push(
                        st,
                        before,
                        Slot::request(deadline as u64, Box::new(|_| {}), None),
                    );
                }
                inner.push(
                    st,
                    command,
                    Slot::request(deadline as u64, on_reply, on_noscript),
                );
                Ok(())
            })
            .unwrap_or(Err(Unavailable::Down))
    }

    /// Queues `CLUSTER SLOTS` (its reply may nest and be larger).
    pub fn submit_topology(&self, command: &[u8], on_reply: OnReply) -> Result<(), Unavailable> {
        self.0
            .with_state(|inner, st| {
                inner.open_for_commands(st)?;
                // Counted like any command (its answer is counted as one).
                if st.in_flight.admit() != Admission::Admitted {
                    return Err(Unavailable::Busy);
                }
                let deadline = now().wrapping_add(inner.settings.timeout_ms);
                inner.push(st, command, Slot::topology(deadline as u64, on_reply));
                Ok(())
            })
            .unwrap_or(Err(Unavailable::Down))
    }

    /// While Redis is down: milliseconds until the next reconnect attempt.
    pub fn retry_in_ms(&self) -> Option<u64> {
        let healthy = self
            .0
            .state
            .try_borrow()
            .map(|st| st.health.admits() || st.shutting_down)
            .unwrap_or(true);
        // Shut down (a retired cluster node): never tried again.
        if healthy {
            return None;
        }
        Some(self.0.reconnect_in_ms())
    }

    /// Closes the connection and cancels every event (worker exit).
    pub fn shutdown(&self) {
        self.0.with_state(|inner, st| inner.close_for_exit(st));
        run_failed();
    }

    /// Whether requests depend on this node (see `State::serving`).
    pub fn set_serving(&self, serving: bool) {
        if let Ok(mut st) = self.0.state.try_borrow_mut() {
            st.serving = serving;
            st.update_gauge();
        }
    }

    /// Whether the connection is open (or opening) and Redis available: a
    /// subscription's connection that Redis closed is not.
    pub fn is_connected(&self) -> bool {
        self.0
            .state
            .try_borrow()
            .map(|st| st.phase != Phase::Disconnected && st.health.is_healthy())
            .unwrap_or(true)
    }

    /// Whether commands may be sent: the connection is up (or being set up
    /// after an idle close, or on probation after an outage).
    pub fn is_healthy(&self) -> bool {
        self.0
            .state
            .try_borrow()
            .map(|st| st.health.admits() && !st.shutting_down)
            .unwrap_or(false)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Up to 200 characters of a peer's text, control characters replaced.
pub(super) fn printable(text: &str) -> String {
    text.chars()
        .take(200)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

impl Inner {
    /// Runs `f` with the state borrowed; `None` if it already is (which would
    /// be a re-entrancy bug: we refuse rather than panic).
    pub(super) fn with_state<R>(&self, f: impl FnOnce(&Inner, &mut State) -> R) -> Option<R> {
        let mut st = self.state.try_borrow_mut().ok()?;
        Some(f(self, &mut st))
    }

    /// Whether commands may be queued now, connecting first after an idle
    /// close; refused at once while Redis is down or the worker exits.
    fn open_for_commands(&self, st: &mut State) -> Result<(), Unavailable> {
        if !st.health.admits() || st.shutting_down {
            return Err(Unavailable::Down);
        }
        if st.phase == Phase::Disconnected {
            self.connect(st);
        }
        match st.phase {
            // Requests don't wait for DNS: pow_shield_fail decides.
            Phase::Disconnected | Phase::Resolving => Err(Unavailable::Down),
            Phase::Connecting | Phase::Securing | Phase::Open => {
                self.refresh_if_expired(st);
                Ok(())
            }
        }
    }

    fn push(&self, st: &mut State, command: &[u8], mut slot: Slot<OnReply>) {
        slot.sent = metrics::redis_command();
        st.pipeline.push(command, slot);
        self.arm_deadline(st);
        if st.phase == Phase::Open {
            self.post_flush();
        }
    }

    /// Hands complete replies to their slots; false if the connection failed.
    pub(super) fn dispatch(&self, st: &mut State, ready: &mut Vec<(OnReply, Reply)>) -> bool {
        let mut events = Vec::new();
        let received = st.pipeline.receive(&mut events);
        // What was answered before a fault is still delivered.
        for event in events {
            match event {
                Event::Step { sent } => metrics::redis_reply(sent),
                Event::Ready => self.connected(st),
                Event::Push(frame) => {
                    if let Some(on_push) = &self.settings.on_push {
                        let on_push = on_push.clone();
                        let deliver = Box::new(move |reply: Reply| {
                            if let Reply::Frame(frame) = reply {
                                on_push(frame);
                            }
                        });
                        ready.push((deliver, Reply::Frame(frame)));
                    }
                }
                Event::Answered {
                    on_reply,
                    reply,
                    sent,
                    deadline,
                } => {
                    metrics::redis_reply(sent);
                    self.answered(st, 1);
                    self.recovered(st, deadline);
                    let frame = match reply {
                        Ok(frame) => {
                            if st.errors.on_success(now() as u64) {
                                notice!(
                                    self.cycle_log,
                                    "pow_shield: redis {} answers without error replies again",
                                    self.settings.name
                                );
                            }
                            Reply::Frame(frame)
                        }
                        Err(text) => {
                            if !(self.settings.cluster && parse_redirect(&text).is_some()) {
                                self.error_reply(st, &text);
                            }
                            Reply::Error(text)
                        }
                    };
                    if let Some(on_reply) = on_reply {
                        ready.push((on_reply, frame));
                    }
                }
            }
        }
        if let Err(broken) = received {
            let (kind, why) = match broken {
                Broken::Protocol(why) => (RedisError::Protocol, why),
                Broken::Handshake(why) => (RedisError::Handshake, why),
            };
            self.fail(st, kind, &why);
            return false;
        }
        if !st.pipeline.output().is_empty() {
            // NOSCRIPT: the EVAL goes out with the next flush.
            self.post_flush();
        }
        self.arm_deadline(st);
        true
    }

    /// An error reply to a request: logged once per kind and episode.
    fn error_reply(&self, st: &mut State, text: &str) {
        metrics::redis_error(RedisError::Reply);
        let kind = error_kind(text);
        if st.errors.on_error(kind, now() as u64) {
            error!(
                self.cycle_log,
                "pow_shield: redis {} answered {kind} errors; those requests are decided by \
                 \"pow_shield_fail\" (first: {})",
                self.settings.name,
                printable(text)
            );
        }
    }

    /// `n` request slots left the queue.
    pub(super) fn answered(&self, st: &mut State, n: usize) {
        if st.in_flight.done(n) {
            notice!(
                self.cycle_log,
                "pow_shield: redis {}: commands in flight back under the cap ({} refused \
                 since the worker started)",
                self.settings.name,
                st.in_flight.refused()
            );
        }
    }

    /// The handshake succeeded. After an outage the connection is on
    /// probation: a `PING` with a request's deadline (and the requests
    /// meanwhile) shows whether Redis answers in time.
    fn connected(&self, st: &mut State) {
        self.ready.set(true);
        let after_outage = st.health.connected();
        if !after_outage
            && self
                .settings
                .outage
                .as_ref()
                .is_some_and(|o| o.replace(false))
        {
            // A fresh connection to a peer an earlier one logged as down.
            notice!(
                self.cycle_log,
                "pow_shield: redis {} is available again",
                self.settings.name
            );
        }
        if after_outage && st.in_flight.admit() == Admission::Admitted {
            let mut ping = Vec::new();
            pow_shield_core::redis::command::encode(&mut ping, &[b"PING"]);
            let deadline = now().wrapping_add(self.settings.timeout_ms);
            self.push(
                st,
                &ping,
                Slot::request(deadline as u64, Box::new(|_| {}), None),
            );
        }
    }

    /// A reply arrived: if in time, it ends an outage (logged once).
    fn recovered(&self, st: &mut State, deadline: u64) {
        let late = (now().wrapping_sub(deadline as ngx_msec_t) as i64) > 0;
        if !late && st.health.answered_in_time(now() as u64) {
            metrics::redis_reconnected();
            st.update_gauge();
            if let Some(outage) = &self.settings.outage {
                outage.set(false);
            }
            notice!(
                self.cycle_log,
                "pow_shield: redis {} is available again",
                self.settings.name
            );
        }
    }
}

thread_local! {
    /// Callbacks of slots failed by a disconnect, run from the flush event
    /// (never from inside the code that held the client's state).
    static FAILED: RefCell<Vec<OnReply>> = const { RefCell::new(Vec::new()) };
}

/// Queues failed slots' callbacks for `run_deferred`.
pub(super) fn defer_failed(failed: Vec<OnReply>) {
    // During thread teardown (a process exiting without exit_process) the
    // queue may be gone: nobody waits then.
    let _ = FAILED.try_with(|f| f.borrow_mut().extend(failed));
}

fn run_failed() {
    let failed = FAILED
        .try_with(|f| core::mem::take(&mut *f.borrow_mut()))
        .unwrap_or_default();
    for on_reply in failed {
        // Each on its own: a bug in one must not strand the other requests.
        crate::ffi::guard((), || on_reply(Reply::Failed));
    }
}

impl Inner {
    /// What runs once the state is released: failed slots, then `on_ready`.
    pub(super) fn run_deferred(&self) {
        run_failed();
        if self.ready.replace(false) {
            if let Some(on_ready) = &self.settings.on_ready {
                on_ready();
            }
        }
    }
}

//! One persistent Redis connection per worker, driven by nginx's event loop
//! (docs/directives.md, "pow_shield_redis"). This is the socket and its events,
//! the only nginx-facing part of the client; what the bytes mean is in
//! `pipeline`, what is logged and when to retry in `health`.
//! - commands of concurrent requests are appended to one buffer and sent by
//!   one posted flush per loop iteration (pipelining);
//! - replies are matched to waiting slots in order;
//! - one timer covers the oldest pending reply: a timeout, a reply that is
//!   not one of ours or a disconnect fails every slot at once, closes the
//!   connection and schedules a reconnect with back-off on a cancelable
//!   timer;
//! - an error reply (WRONGTYPE, READONLY, OOM...) fails only its own slot:
//!   the connection stays; each kind is logged once per episode;
//! - while Redis is down, or with `MAX_IN_FLIGHT` commands waiting, `submit`
//!   refuses at once (`Unavailable::Down`, `Unavailable::Busy`): requests
//!   never wait on a dead or drowning Redis.
//!
//! Nothing here blocks: sockets are non-blocking, and callbacks only post
//! events.

use core::cell::{Cell, RefCell, UnsafeCell};
use core::ffi::c_void;
use core::ptr;

use nginx_sys::{
    ngx_addr_t, ngx_connection_t, ngx_current_msec, ngx_event_t, ngx_log_t, ngx_msec_t,
    ngx_peer_connection_t, ngx_ssl_t, ngx_uint_t, NGX_AGAIN, NGX_LOG_CRIT, NGX_LOG_INFO, NGX_OK,
};
use redis_protocol::resp2::types::OwnedFrame;

use super::tls;
pub use super::tls::PeerName;
use pow_shield_core::metrics::{self, RedisError};
use pow_shield_core::redis::cluster::parse_redirect;
use pow_shield_core::redis::command::error_kind;
use pow_shield_core::redis::health::{
    log_message, Admission, Availability, ErrorReplies, Failure, InFlight,
};
pub use pow_shield_core::redis::pipeline::Resend;
use pow_shield_core::redis::pipeline::{Broken, Event, Pipeline, Slot, READ_CHUNK};

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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Disconnected,
    Connecting,
    /// TLS handshake under way (`rediss://`).
    Securing,
    Open,
}

struct State {
    conn: *mut ngx_connection_t,
    phase: Phase,
    /// Redis answered the last handshake; while not, submissions are
    /// refused and only reconnect probes talk to Redis.
    health: Availability,
    pipeline: Pipeline<OnReply>,
    /// Request slots in the pipeline, capped.
    in_flight: InFlight,
    errors: ErrorReplies,
    shutting_down: bool,
    /// Requests depend on this node: always with a single Redis; in a
    /// Redis Cluster, while the map gives it slots (a seed or a former
    /// master that owns none is not what the fallback gauge reports).
    serving: bool,
    /// This connection counts 1 in the fallback gauge now.
    in_gauge: bool,
}

impl State {
    /// Keeps the fallback gauge at "down and depended on" for this node.
    fn update_gauge(&mut self) {
        let down = self.serving && !self.health.is_healthy() && !self.shutting_down;
        if down != self.in_gauge {
            self.in_gauge = down;
            metrics::redis_fallback(down);
        }
    }
}

/// The client. Boxed so that nginx's events can point at it.
pub struct Client(Box<Inner>);

struct Inner {
    settings: Settings,
    state: RefCell<State>,
    /// nginx writes these (timers, posted flags) through raw pointers, so
    /// they live outside the RefCell.
    flush_ev: UnsafeCell<ngx_event_t>,
    deadline_ev: UnsafeCell<ngx_event_t>,
    reconnect_ev: UnsafeCell<ngx_event_t>,
    /// The connection's own log: nginx's per-attempt connect errors are
    /// kept below `crit` so a dead Redis logs one line per transition.
    log: UnsafeCell<ngx_log_t>,
    /// The worker's log, for our own lines.
    cycle_log: *mut ngx_log_t,
    /// With TLS, the connection log's last line (OpenSSL's reason for a
    /// failure), quoted in ours instead of logged on every attempt.
    last_error: RefCell<String>,
    /// A handshake succeeded: run `on_ready` once the state is released.
    ready: Cell<bool>,
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
        // SAFETY: cycle_log is the worker's live log; we take a copy of it.
        let mut log = unsafe { ptr::read(cycle_log) };
        log.log_level = log.log_level.min(NGX_LOG_CRIT as usize);
        log.handler = None;
        log.data = ptr::null_mut();
        let inner = Box::new(Inner {
            settings,
            state: RefCell::new(State {
                conn: ptr::null_mut(),
                phase: Phase::Disconnected,
                health: Availability::default(),
                pipeline: Pipeline::default(),
                in_flight: InFlight::new(MAX_IN_FLIGHT),
                errors: ErrorReplies::default(),
                shutting_down: false,
                serving: true,
                in_gauge: false,
            }),
            // SAFETY: a zeroed ngx_event_t is nginx's initial event state.
            flush_ev: UnsafeCell::new(unsafe { core::mem::zeroed() }),
            deadline_ev: UnsafeCell::new(unsafe { core::mem::zeroed() }),
            reconnect_ev: UnsafeCell::new(unsafe { core::mem::zeroed() }),
            log: UnsafeCell::new(log),
            cycle_log,
            last_error: RefCell::new(String::new()),
            ready: Cell::new(false),
        });
        let data: *mut c_void = ptr::from_ref::<Inner>(&inner).cast_mut().cast();
        if inner.settings.tls.is_some() {
            // SAFETY: our log, not yet known to nginx; `data` outlives it.
            unsafe {
                let log = inner.log.get();
                (*log).log_level = NGX_LOG_INFO as usize;
                (*log).writer = Some(capture_writer);
                (*log).wdata = data;
                (*log).next = ptr::null_mut();
            }
        }
        for (ev, handler) in [
            (
                inner.flush_ev.get(),
                flush_handler as unsafe extern "C" fn(*mut ngx_event_t),
            ),
            (inner.deadline_ev.get(), deadline_handler),
            (inner.reconnect_ev.get(), reconnect_handler),
        ] {
            // SAFETY: the events are ours and not yet known to nginx.
            unsafe {
                (*ev).data = data;
                (*ev).handler = Some(handler);
                (*ev).log = inner.log.get();
            }
        }
        // Reconnect timers must not hold a worker that is shutting down.
        // SAFETY: as above.
        unsafe { (*inner.reconnect_ev.get()).set_cancelable(1) };
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
            .map(|st| st.health.is_healthy() || st.shutting_down)
            .unwrap_or(true);
        // Shut down (a retired cluster node): never tried again.
        if healthy {
            return None;
        }
        // SAFETY: reading our own event's timer fields.
        let ev = unsafe { &*self.0.reconnect_ev.get() };
        if ev.timer_set() == 0 {
            return Some(0);
        }
        // Signed: in the loop iteration where it is due, the timer is still
        // set but already in the past.
        Some(((ev.timer.key as ngx_msec_t).wrapping_sub(now()) as i64).max(0) as u64)
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

    /// Whether the connection is up (or being set up after an idle close).
    pub fn is_healthy(&self) -> bool {
        self.0
            .state
            .try_borrow()
            .map(|st| st.health.is_healthy() && !st.shutting_down)
            .unwrap_or(false)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Up to 200 characters of a peer's text, control characters replaced.
fn printable(text: &str) -> String {
    text.chars()
        .take(200)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn now() -> ngx_msec_t {
    // SAFETY: nginx's cached monotonic millisecond clock; single-threaded.
    unsafe { ngx_current_msec }
}

impl Inner {
    /// Runs `f` with the state borrowed; `None` if it already is (which would
    /// be a re-entrancy bug: we refuse rather than panic).
    fn with_state<R>(&self, f: impl FnOnce(&Inner, &mut State) -> R) -> Option<R> {
        let mut st = self.state.try_borrow_mut().ok()?;
        Some(f(self, &mut st))
    }

    /// Whether commands may be queued now, connecting first after an idle
    /// close; refused at once while Redis is down or the worker exits.
    fn open_for_commands(&self, st: &mut State) -> Result<(), Unavailable> {
        if !st.health.is_healthy() || st.shutting_down {
            return Err(Unavailable::Down);
        }
        if st.phase == Phase::Disconnected {
            self.connect(st);
            if st.phase == Phase::Disconnected {
                return Err(Unavailable::Down);
            }
        }
        Ok(())
    }

    fn push(&self, st: &mut State, command: &[u8], mut slot: Slot<OnReply>) {
        slot.sent = metrics::redis_command();
        st.pipeline.push(command, slot);
        self.arm_deadline(st);
        if st.phase == Phase::Open {
            self.post_flush();
        }
    }

    fn connect(&self, st: &mut State) {
        let s = &self.settings;
        // SAFETY: a zeroed peer connection is its initial state; the address
        // and name point at configuration memory that outlives the worker.
        let mut pc: ngx_peer_connection_t = unsafe { core::mem::zeroed() };
        pc.sockaddr = s.addr.sockaddr;
        pc.socklen = s.addr.socklen;
        pc.name = ptr::from_ref(&s.addr.name).cast_mut();
        pc.get = Some(nginx_sys::ngx_event_get_peer);
        pc.log = self.log.get();
        pc.tries = 1;
        pc.set_log_error(nginx_sys::ngx_connection_log_error_e_NGX_ERROR_INFO);
        // SAFETY: pc is fully initialised for a plain TCP/unix connect.
        let rc = unsafe { nginx_sys::ngx_event_connect_peer(&mut pc) };
        let err = nginx_sys::ngx_socket_errno();
        if pc.connection.is_null() || !(rc == NGX_OK as isize || rc == NGX_AGAIN as isize) {
            let reason = format!(
                "connect() failed: {}",
                std::io::Error::from_raw_os_error(err)
            );
            self.fail(st, RedisError::Io, &reason);
            return;
        }
        let c = pc.connection;
        // SAFETY: a fresh connection from nginx; we own it until we close it.
        unsafe {
            (*c).data = ptr::from_ref(self).cast_mut().cast();
            (*(*c).read).handler = Some(read_handler);
            (*(*c).write).handler = Some(write_handler);
        }
        st.conn = c;
        st.phase = Phase::Connecting;
        self.last_error.borrow_mut().clear();
        // The handshake goes first; its deadline also bounds the connect
        // (and TLS).
        let deadline = now().wrapping_add(s.connect_timeout_ms + s.timeout_ms);
        st.pipeline
            .open(&s.handshake, deadline as u64, metrics::redis_command);
        self.arm_deadline(st);
        if rc == NGX_OK as isize {
            self.established(st);
        }
    }

    /// The socket is connected: TLS first if configured, then commands.
    fn established(&self, st: &mut State) {
        let Some(t) = &self.settings.tls else {
            st.phase = Phase::Open;
            self.post_flush();
            return;
        };
        st.phase = Phase::Securing;
        // SAFETY: our freshly connected socket, without TLS yet.
        if let Err(why) = unsafe { tls::attach(st.conn, t.ssl, &t.name) } {
            self.fail(st, RedisError::Handshake, &why);
            return;
        }
        self.secure(st);
    }

    /// Drives the TLS handshake; nginx calls `tls_handler` when it needs
    /// the socket again.
    fn secure(&self, st: &mut State) {
        let c = st.conn;
        // SAFETY: our connection with TLS attached; never blocks.
        let rc = unsafe { nginx_sys::ngx_ssl_handshake(c) };
        if rc == NGX_AGAIN as isize {
            // SAFETY: as above; nginx calls it once the handshake ends.
            unsafe { (*(*c).ssl).handler = Some(tls_handler) };
            return;
        }
        if rc == NGX_OK as isize {
            self.secured(st);
        } else {
            let why = self.quote_last_error("TLS handshake failed");
            self.fail(st, RedisError::Handshake, &why);
        }
    }

    /// The handshake ended: checks the certificate, then sends commands.
    fn secured(&self, st: &mut State) {
        let c = st.conn;
        let Some(t) = &self.settings.tls else {
            return;
        };
        // SAFETY: our connection; `handshaked` says the handshake completed.
        let done = unsafe { !(*c).ssl.is_null() && (*(*c).ssl).handshaked() != 0 };
        if !done {
            let why = self.quote_last_error("TLS handshake failed");
            self.fail(st, RedisError::Handshake, &why);
            return;
        }
        if t.verify {
            // SAFETY: the handshake completed.
            if let Err(why) = unsafe { tls::verify(c, &t.name) } {
                self.fail(st, RedisError::Handshake, &why);
                return;
            }
        }
        // SAFETY: nginx's handshake handlers step aside for ours.
        unsafe {
            (*(*c).read).handler = Some(read_handler);
            (*(*c).write).handler = Some(write_handler);
        }
        st.phase = Phase::Open;
        self.flush(st);
    }

    /// `what`, with OpenSSL's reason if the connection logged one.
    fn quote_last_error(&self, what: &str) -> String {
        let last = core::mem::take(&mut *self.last_error.borrow_mut());
        if last.is_empty() {
            what.to_owned()
        } else {
            format!("{what}: {last}")
        }
    }

    /// Sends what the buffer holds, as far as the socket takes it.
    fn flush(&self, st: &mut State) {
        if st.phase != Phase::Open || st.pipeline.output().is_empty() {
            return;
        }
        let c = st.conn;
        while !st.pipeline.output().is_empty() {
            let out = st.pipeline.output();
            // SAFETY: c is our open connection; send only reads from our
            // buffer (nginx's signature takes a mutable pointer).
            let n = unsafe {
                match (*c).send {
                    Some(send) => send(c, out.as_ptr().cast_mut(), out.len()),
                    None => -1,
                }
            };
            if n > 0 {
                st.pipeline.sent(n as usize);
            } else if n == NGX_AGAIN as isize {
                break;
            } else {
                let why = self.quote_last_error("send() failed");
                self.fail(st, RedisError::Io, &why);
                return;
            }
        }
        // SAFETY: c is open; asks to be told when it is writable again.
        if !st.pipeline.output().is_empty()
            && unsafe { nginx_sys::ngx_handle_write_event((*c).write, 0) } != NGX_OK as isize
        {
            self.fail(
                st,
                RedisError::Io,
                "cannot wait for the socket to be writable",
            );
        }
    }

    /// Reads and dispatches every complete reply; returns the callbacks to
    /// run once the state is released.
    fn read(&self, st: &mut State) -> Vec<(OnReply, Reply)> {
        let mut ready = Vec::new();
        let c = st.conn;
        if st.phase != Phase::Open {
            return ready;
        }
        loop {
            let input = st.pipeline.input();
            input.reserve(READ_CHUNK);
            let spare = input.spare_capacity_mut();
            // SAFETY: recv writes at most spare.len() bytes into our buffer.
            let n = unsafe {
                match (*c).recv {
                    Some(recv) => recv(c, spare.as_mut_ptr().cast(), spare.len()),
                    None => -1,
                }
            };
            if n > 0 {
                // SAFETY: recv initialised n bytes of the spare capacity.
                unsafe { input.set_len(input.len() + n as usize) };
                if !self.dispatch(st, &mut ready) {
                    return ready;
                }
                continue;
            }
            if n == NGX_AGAIN as isize {
                break;
            }
            if n == 0 && st.pipeline.is_idle() && st.health.is_healthy() {
                // Redis closed an idle connection (e.g. its `timeout`):
                // reconnect on the next request, nothing to report.
                self.disconnect(st);
            } else {
                let why = self.quote_last_error(if n == 0 {
                    "connection closed by Redis"
                } else {
                    "recv() failed"
                });
                self.fail(st, RedisError::Io, &why);
            }
            return ready;
        }
        // SAFETY: c is open; keeps the read event armed.
        if unsafe { nginx_sys::ngx_handle_read_event((*c).read, 0) } != NGX_OK as isize {
            self.fail(
                st,
                RedisError::Io,
                "cannot wait for the socket to be readable",
            );
        }
        ready
    }

    /// Hands complete replies to their slots; false if the connection failed.
    fn dispatch(&self, st: &mut State, ready: &mut Vec<(OnReply, Reply)>) -> bool {
        let mut events = Vec::new();
        let received = st.pipeline.receive(&mut events);
        // What was answered before a fault is still delivered.
        for event in events {
            match event {
                Event::Step { sent } => metrics::redis_reply(sent),
                Event::Ready => self.recovered(st),
                Event::Answered {
                    on_reply,
                    reply,
                    sent,
                } => {
                    metrics::redis_reply(sent);
                    self.answered(st, 1);
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
    fn answered(&self, st: &mut State, n: usize) {
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

    fn recovered(&self, st: &mut State) {
        self.ready.set(true);
        if st.health.recovered() {
            metrics::redis_reconnected();
            st.update_gauge();
            notice!(
                self.cycle_log,
                "pow_shield: redis {} is available again",
                self.settings.name
            );
        }
    }

    /// Redis failed: answer every slot with `None` (the fallback decides),
    /// close, log the transition once, and retry later.
    fn fail(&self, st: &mut State, kind: RedisError, reason: &str) {
        metrics::redis_error(kind);
        self.disconnect(st);
        if st.shutting_down {
            return;
        }
        let (failure, backoff_ms) = st.health.failed();
        if failure == Failure::Started {
            st.update_gauge();
            error!(
                self.cycle_log,
                "pow_shield: redis {} unavailable ({reason}); requests are decided by \
                 \"pow_shield_fail\" until it recovers",
                self.settings.name
            );
        } else {
            debug!(
                self.cycle_log,
                "pow_shield: redis {} still unavailable ({reason})", self.settings.name
            );
        }
        // SAFETY: our reconnect event; nginx owns the timer tree.
        unsafe {
            let ev = self.reconnect_ev.get();
            if (*ev).timer_set() == 0 {
                nginx_sys::ngx_add_timer(ev, backoff_ms as ngx_msec_t);
            }
        }
    }

    /// Closes the socket and fails what was pending (callbacks are queued
    /// onto the flush event's run, never called while borrowed).
    fn disconnect(&self, st: &mut State) {
        if !st.conn.is_null() {
            // SAFETY: our connection; TLS state goes first, then nginx
            // removes its events and timers, then the TLS pool goes.
            unsafe {
                tls::detach(st.conn);
                let pool = (*st.conn).pool;
                nginx_sys::ngx_close_connection(st.conn);
                tls::free_pool(pool);
            }
            st.conn = ptr::null_mut();
        }
        st.phase = Phase::Disconnected;
        let (requests, failed) = st.pipeline.abandon();
        self.answered(st, requests);
        if !failed.is_empty() {
            // During thread teardown (a process exiting without
            // exit_process) the queue may be gone: nobody waits then.
            let _ = FAILED.try_with(|f| f.borrow_mut().extend(failed));
            self.post_flush();
        }
        // SAFETY: our own events.
        unsafe {
            let ev = self.deadline_ev.get();
            if (*ev).timer_set() != 0 {
                nginx_sys::ngx_del_timer(ev);
            }
        }
    }

    /// The worker is leaving: close, fail what waits, never reconnect.
    fn close_for_exit(&self, st: &mut State) {
        st.shutting_down = true;
        st.update_gauge();
        self.disconnect(st);
        self.cancel_events();
    }

    fn cancel_events(&self) {
        // SAFETY: our own events; removing them from nginx's timer tree and
        // posted queue before the client goes away.
        unsafe {
            for ev in [
                self.flush_ev.get(),
                self.deadline_ev.get(),
                self.reconnect_ev.get(),
            ] {
                if (*ev).timer_set() != 0 {
                    nginx_sys::ngx_del_timer(ev);
                }
                if (*ev).posted() != 0 {
                    nginx_sys::ngx_delete_posted_event(ev);
                }
            }
        }
    }

    fn post_flush(&self) {
        // SAFETY: our flush event; posting is idempotent while queued.
        unsafe {
            let ev = self.flush_ev.get();
            if (*ev).posted() == 0 {
                nginx_sys::ngx_post_event(ev, ptr::addr_of_mut!(nginx_sys::ngx_posted_events));
            }
        }
    }

    /// Keeps the deadline timer on the oldest pending reply.
    fn arm_deadline(&self, st: &State) {
        // SAFETY: our deadline event.
        unsafe {
            let ev = self.deadline_ev.get();
            match st.pipeline.oldest() {
                None => {
                    if (*ev).timer_set() != 0 {
                        nginx_sys::ngx_del_timer(ev);
                    }
                }
                Some(slot) => {
                    // Signed: an overdue deadline fires on the next tick.
                    let left = ((slot.deadline as ngx_msec_t).wrapping_sub(now()) as i64).max(1);
                    nginx_sys::ngx_add_timer(ev, left as ngx_msec_t);
                }
            }
        }
    }

    fn on_deadline(&self, st: &mut State) {
        let Some(front) = st.pipeline.oldest() else {
            return;
        };
        let overdue = (now().wrapping_sub(front.deadline as ngx_msec_t) as i64) >= 0;
        if overdue {
            let what = if st.phase == Phase::Securing {
                "TLS handshake timed out"
            } else if front.is_handshake() {
                "no answer to the handshake"
            } else {
                "reply timed out"
            };
            self.fail(st, RedisError::Timeout, what);
        } else {
            self.arm_deadline(st);
        }
    }

    /// The non-blocking connect finished: did it succeed?
    fn on_connected(&self, st: &mut State) {
        let c = st.conn;
        let mut err: libc::c_int = 0;
        let mut len = core::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: c is our connecting socket; SO_ERROR reads its result.
        let rc = unsafe {
            libc::getsockopt(
                (*c).fd,
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                ptr::from_mut(&mut err).cast(),
                &mut len,
            )
        };
        if rc == -1 {
            err = nginx_sys::ngx_socket_errno();
        }
        if err != 0 {
            let reason = format!(
                "connect() failed: {}",
                std::io::Error::from_raw_os_error(err)
            );
            self.fail(st, RedisError::Io, &reason);
            return;
        }
        self.established(st);
    }
}

thread_local! {
    /// Callbacks of slots failed by a disconnect, run from the flush event
    /// (never from inside the code that held the client's state).
    static FAILED: RefCell<Vec<OnReply>> = const { RefCell::new(Vec::new()) };
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
    fn run_deferred(&self) {
        run_failed();
        if self.ready.replace(false) {
            if let Some(on_ready) = &self.settings.on_ready {
                on_ready();
            }
        }
    }
}

/// Recovers the client from an event's data.
///
/// # Safety
/// `data` is an `Inner` pointer set by this module, alive while its events
/// or connection are registered with nginx.
unsafe fn inner<'a>(data: *mut c_void) -> &'a Inner {
    // SAFETY: per the contract.
    unsafe { &*data.cast::<Inner>() }
}

unsafe extern "C" fn flush_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: our flush event carries the client.
        let inner = unsafe { inner((*ev).data) };
        inner.with_state(|inner, st| inner.flush(st));
        inner.run_deferred();
    })
}

unsafe extern "C" fn deadline_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: our deadline event carries the client.
        let inner = unsafe { inner((*ev).data) };
        inner.with_state(|inner, st| inner.on_deadline(st));
        inner.run_deferred();
    })
}

unsafe extern "C" fn reconnect_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: our reconnect event carries the client; exiting workers
        // don't reconnect.
        let (inner, exiting) = unsafe {
            (
                inner((*ev).data),
                nginx_sys::ngx_exiting != 0 || nginx_sys::ngx_terminate != 0,
            )
        };
        if exiting {
            return;
        }
        inner.with_state(|inner, st| {
            if st.phase == Phase::Disconnected {
                inner.connect(st);
            }
        });
        inner.run_deferred();
    })
}

unsafe extern "C" fn write_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: connection events carry the connection, whose data is ours.
        let inner = unsafe { inner((*(*ev).data.cast::<ngx_connection_t>()).data) };
        inner.with_state(|inner, st| {
            if st.phase == Phase::Connecting {
                inner.on_connected(st);
            } else {
                inner.flush(st);
            }
        });
        inner.run_deferred();
    })
}

unsafe extern "C" fn read_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: as in write_handler.
        let c = unsafe { (*ev).data.cast::<ngx_connection_t>() };
        // SAFETY: as above.
        let (inner, closing) = unsafe { (inner((*c).data), (*c).close() != 0) };
        let ready = inner
            .with_state(|inner, st| {
                if closing {
                    // nginx is shutting the worker down (worker_shutdown_timeout).
                    inner.close_for_exit(st);
                    return Vec::new();
                }
                if st.phase == Phase::Connecting {
                    inner.on_connected(st);
                }
                inner.read(st)
            })
            .unwrap_or_default();
        for (on_reply, frame) in ready {
            // Each on its own: a bug in one must not strand the other requests.
            crate::ffi::guard((), || on_reply(frame));
        }
        inner.run_deferred();
    })
}

/// nginx's TLS handshake handler calls this when the handshake ends, done
/// or failed.
unsafe extern "C" fn tls_handler(c: *mut ngx_connection_t) {
    crate::ffi::guard((), || {
        // SAFETY: our connection, whose data is the client.
        let inner = unsafe { inner((*c).data) };
        inner.with_state(|inner, st| {
            if st.phase == Phase::Securing && st.conn == c {
                inner.secured(st);
            }
        });
        inner.run_deferred();
    })
}

/// The TLS connection's log writer: keeps the last line for our own
/// (logged once per outage), passes on what nginx logs as critical.
unsafe extern "C" fn capture_writer(
    log: *mut ngx_log_t,
    level: ngx_uint_t,
    buf: *mut u8,
    len: usize,
) {
    crate::ffi::guard((), || {
        // SAFETY: nginx passes the formatted line; wdata is the client.
        let (inner, line) = unsafe { (inner((*log).wdata), core::slice::from_raw_parts(buf, len)) };
        let line = String::from_utf8_lossy(line);
        let message = log_message(&line);
        if level <= NGX_LOG_CRIT as ngx_uint_t {
            log_at!(level, inner.cycle_log, "{message}");
        }
        if let Ok(mut last) = inner.last_error.try_borrow_mut() {
            last.clear();
            last.push_str(message);
        }
    })
}

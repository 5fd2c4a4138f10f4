//! One Redis connection's life on nginx's event loop: its host name
//! resolved (`resolve`), the socket connected and secured (`link`), the
//! pipeline's bytes sent by one posted flush per loop iteration and
//! replies read and handed on (`exchange`), every pending reply under one
//! deadline timer, and after a failure a reconnect with back-off on a
//! cancelable timer. Every function nginx calls for it is in `events.rs`,
//! behind the panic guard; the requests' callbacks run once the state is
//! released, each guarded on its own. The host name's steps are
//! `names.rs`.
//! - a timeout, a reply that is not one of ours or a disconnect fails every
//!   slot at once, closes the connection and schedules a reconnect; it is
//!   logged once per outage, quoting OpenSSL's reason with TLS;
//! - Redis closing an idle connection is not a failure: the next command
//!   connects again.

use core::cell::{Cell, RefCell};
use core::ffi::c_void;
use core::ptr;

use nginx_sys::{ngx_log_t, ngx_msec_t};

mod deadline;
mod events;
mod names;

use self::events::{
    deadline_handler, flush_handler, read_handler, reconnect_handler, tls_handler, write_handler,
};
use super::event::Event;
use super::exchange::{Exchange, OnReply, Pending, Reply, Unavailable};
use super::link::{ConnLog, Handlers, Handshake, Io, Link};
use super::now;
use super::resolve::Names;
use super::settings::Settings;
use pow_shield_core::cluster::fallback::Reach;
use pow_shield_core::metrics::{self, RedisError};
use pow_shield_core::redis::health::Follow;
use pow_shield_core::redis::pipeline::{Resend, Slot, READ_CHUNK};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Disconnected,
    /// Waiting for nginx's resolver (a host name, `Settings::resolve`).
    Resolving,
    Connecting,
    /// TLS handshake under way (`rediss://`).
    Securing,
    Open,
}

struct State {
    link: Option<Link>,
    phase: Phase,
    exchange: Exchange,
}

/// A connection, boxed so that nginx's events can point at it.
pub(super) struct Connection {
    settings: Settings,
    state: RefCell<State>,
    /// Posted: sends what this loop iteration queued.
    flush_ev: Event,
    /// On the oldest pending reply.
    deadline_ev: Event,
    /// After a failure (and to apply a resolver's answer).
    reconnect_ev: Event,
    log: ConnLog,
    /// With `Settings::resolve`: the host name's address.
    names: Names,
    /// Callbacks of slots a disconnect failed, run once the state is
    /// released (`run_deferred`), never from the code that held it.
    failed: RefCell<Vec<OnReply>>,
    /// The replies a read hands on, kept between reads (`read_handler`).
    ready: Cell<Vec<(OnReply, Reply)>>,
}

impl Connection {
    /// Creates the connection and starts connecting.
    pub(super) fn start(settings: Settings, cycle_log: *mut ngx_log_t) -> Box<Connection> {
        let subscriber = settings.on_push.is_some();
        // A sentinel decides no request: its health is not the node's.
        let node = match settings.outage {
            None => crate::shm::health::peer_of(&settings.name),
            Some(_) => None,
        };
        let connection = Box::new(Connection {
            settings,
            state: RefCell::new(State {
                link: None,
                phase: Phase::Disconnected,
                exchange: Exchange::new(subscriber, node, cycle_log),
            }),
            flush_ev: Event::idle(),
            deadline_ev: Event::idle(),
            reconnect_ev: Event::idle(),
            log: ConnLog::new(cycle_log),
            names: Names::new(),
            failed: RefCell::new(Vec::new()),
            ready: Cell::new(Vec::with_capacity(8)),
        });
        connection.attach_events();
        connection.with_state(|c, st| c.connect(st));
        connection
    }

    /// Points the events (and with TLS the log) at this connection; once,
    /// at its final address, before nginx knows any of them.
    fn attach_events(&self) {
        let data: *mut c_void = ptr::from_ref::<Connection>(self).cast_mut().cast();
        if self.settings.tls.is_some() {
            self.log.capture();
        }
        self.flush_ev.attach(data, flush_handler, self.log.get());
        self.deadline_ev
            .attach(data, deadline_handler, self.log.get());
        self.reconnect_ev
            .attach(data, reconnect_handler, self.log.get());
        // Reconnect timers must not hold a worker that is shutting down.
        self.reconnect_ev.set_cancelable(true);
        self.names.wake_with(&self.reconnect_ev);
    }

    /// Runs `f` with the state borrowed; `None` if it already is (which would
    /// be a re-entrancy bug: we refuse rather than panic).
    fn with_state<R>(&self, f: impl FnOnce(&Connection, &mut State) -> R) -> Option<R> {
        let mut st = self.state.try_borrow_mut().ok()?;
        Some(f(self, &mut st))
    }

    /// Queues `command` (after `before`, both or neither); refused at once
    /// while Redis is down or `MAX_IN_FLIGHT` commands wait, and then
    /// `pending` comes back unused.
    pub(super) fn submit<P: Pending>(
        &self,
        before: Option<&[u8]>,
        command: &[u8],
        on_noscript: Option<Resend>,
        pending: P,
    ) -> Result<(), (Unavailable, P)> {
        // (The state borrowed here, not in `with_state`'s closure: `pending`
        // is given back on either refusal without being kept aside.)
        let Ok(mut st) = self.state.try_borrow_mut() else {
            return Err((Unavailable::Down, pending));
        };
        let st = &mut *st;
        let together = 1 + usize::from(before.is_some());
        let open = self.open_for_commands(st);
        if let Err(why) = open.and_then(|()| st.exchange.admit(together, &self.settings)) {
            return Err((why, pending));
        }
        let deadline = self.deadline();
        if let Some(before) = before {
            // Its reply (OK) is nobody's.
            self.push(st, before, Slot::request(deadline, OnReply::Nobody, None));
        }
        let slot = Slot::request(deadline, pending.on_reply(), on_noscript);
        // (`before` is ASKING: its EVAL, if any, goes after one too.)
        let slot = match before {
            Some(_) => slot.after_asking(),
            None => slot,
        };
        self.push(st, command, slot);
        Ok(())
    }

    /// Queues `CLUSTER SLOTS` (its reply may nest and be larger).
    pub(super) fn submit_topology(
        &self,
        command: &[u8],
        on_reply: OnReply,
    ) -> Result<(), Unavailable> {
        self.with_state(|c, st| {
            c.open_for_commands(st)?;
            st.exchange.admit_topology()?;
            c.push(st, command, Slot::topology(c.deadline(), on_reply));
            Ok(())
        })
        .unwrap_or(Err(Unavailable::Down))
    }

    /// While Redis is down: milliseconds until the next reconnect attempt.
    pub(super) fn retry_in_ms(&self) -> Option<u64> {
        // Shut down (a retired cluster node): never tried again.
        let down = self
            .state
            .try_borrow()
            .map(|st| st.exchange.is_down())
            .unwrap_or(false);
        down.then(|| self.reconnect_ev.ms_left())
    }

    /// Closes the connection and cancels every event (worker exit).
    pub(super) fn shutdown(&self) {
        self.with_state(|c, st| c.close_for_exit(st));
        self.run_failed();
    }

    /// Whether requests depend on this node.
    pub(super) fn set_serving(&self, serving: bool) {
        if let Ok(mut st) = self.state.try_borrow_mut() {
            st.exchange.set_serving(serving);
        }
    }

    /// Whether the connection is open (or opening) and Redis available.
    pub(super) fn is_connected(&self) -> bool {
        self.state
            .try_borrow()
            .map(|st| st.phase != Phase::Disconnected && st.exchange.is_healthy())
            .unwrap_or(true)
    }

    /// Whether an unpaid refusal counts a strike now (not within a grace
    /// after an outage: `Availability::strikes_unpaid`).
    #[inline]
    pub(super) fn strikes_unpaid(&self) -> bool {
        self.state
            .try_borrow()
            .map(|st| st.exchange.strikes_unpaid())
            .unwrap_or(true)
    }

    /// Whether commands may be sent (as the node's workers share it).
    pub(super) fn is_healthy(&self) -> bool {
        self.with_state(|c, st| {
            c.follow_node(st);
            st.exchange.admits()
        })
        .unwrap_or(false)
    }

    /// `is_healthy`, then `is_connected`, as `Client::reach` tells them,
    /// in one look at the state.
    pub(super) fn reach(&self) -> Reach {
        let Ok(mut st) = self.state.try_borrow_mut() else {
            return Reach::Down;
        };
        self.follow_node(&mut st);
        if !st.exchange.admits() {
            return Reach::Down;
        }
        match st.phase != Phase::Disconnected && st.exchange.is_healthy() {
            true => Reach::Connected,
            false => Reach::Unknown,
        }
    }

    /// A request's deadline, from now.
    fn deadline(&self) -> u64 {
        now().wrapping_add(self.settings.timeout_ms) as u64
    }

    /// Whether commands may be queued now, connecting first after an idle
    /// close; refused at once while Redis is down or the worker exits.
    /// (Inline: asked for every command, almost always open.)
    #[inline(always)]
    fn open_for_commands(&self, st: &mut State) -> Result<(), Unavailable> {
        self.follow_node(st);
        if !st.exchange.admits() {
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

    #[inline(always)]
    fn push(&self, st: &mut State, command: &[u8], slot: Slot<OnReply>) {
        st.exchange.push(command, slot);
        self.arm_deadline(st);
        if st.phase == Phase::Open {
            self.flush_ev.post();
        }
    }

    /// Connects: resolves the host name first when it needs it.
    fn connect(&self, st: &mut State) {
        if self.settings.resolve.is_some() && self.names.needed() {
            self.start_resolve(st, false);
            return;
        }
        self.connect_to(st);
    }

    /// Starts a non-blocking connect, with the handshake queued first.
    fn connect_to(&self, st: &mut State) {
        let s = &self.settings;
        let addr = match (&s.resolve, self.names.addr()) {
            (Some(_), Some(addr)) => addr,
            _ => s.addr,
        };
        let handlers = Handlers {
            read: read_handler,
            write: write_handler,
            secured: tls_handler,
        };
        // The configuration's address, or the names' one, replaced only
        // once this connection is closed; the log and this connection
        // outlive it.
        let data = ptr::from_ref(self).cast_mut().cast();
        let connected = match Link::connect(addr, self.log.get(), data, handlers) {
            Ok((link, connected)) => {
                st.link = Some(link);
                connected
            }
            Err(why) => {
                self.fail(st, RedisError::Io, &why);
                return;
            }
        };
        st.phase = Phase::Connecting;
        self.log.clear();
        // The handshake goes first; its deadline also bounds the connect
        // (and TLS).
        let deadline = now().wrapping_add(s.connect_timeout_ms + s.timeout_ms);
        st.exchange
            .pipeline
            .open(&s.handshake, deadline as u64, metrics::redis_command);
        self.arm_deadline(st);
        if connected {
            self.established(st);
        }
    }

    /// The non-blocking connect finished: did it succeed?
    fn on_connected(&self, st: &mut State) {
        let Some(link) = &st.link else {
            return;
        };
        match link.connected() {
            Ok(()) => self.established(st),
            Err(why) => self.fail(st, RedisError::Io, &why),
        }
    }

    /// The socket is connected: TLS first if configured, then commands.
    fn established(&self, st: &mut State) {
        let Some(t) = &self.settings.tls else {
            st.phase = Phase::Open;
            self.flush_ev.post();
            return;
        };
        st.phase = Phase::Securing;
        let Some(link) = &st.link else {
            return;
        };
        if let Err(why) = link.start_tls(t.ssl, &t.name) {
            self.fail(st, RedisError::Handshake, &why);
            return;
        }
        self.secure(st);
    }

    /// Drives the TLS handshake; nginx calls `tls_handler` when it needs
    /// the socket again.
    fn secure(&self, st: &mut State) {
        let Some(link) = &st.link else {
            return;
        };
        match link.handshake() {
            Handshake::Again => {}
            Handshake::Done => self.secured(st),
            Handshake::Failed => {
                let why = self.log.quote("TLS handshake failed");
                self.fail(st, RedisError::Handshake, &why);
            }
        }
    }

    /// The handshake ended: checks the certificate, then sends commands.
    fn secured(&self, st: &mut State) {
        let (Some(t), Some(link)) = (&self.settings.tls, &st.link) else {
            return;
        };
        if !link.handshaked() {
            let why = self.log.quote("TLS handshake failed");
            self.fail(st, RedisError::Handshake, &why);
            return;
        }
        let verified = if t.verify {
            link.verify(&t.name)
        } else {
            Ok(())
        };
        if let Err(why) = verified {
            self.fail(st, RedisError::Handshake, &why);
            return;
        }
        link.secured();
        st.phase = Phase::Open;
        self.flush(st);
    }

    /// Sends what the buffer holds, as far as the socket takes it.
    fn flush(&self, st: &mut State) {
        if st.phase != Phase::Open || st.exchange.pipeline.output().is_empty() {
            return;
        }
        let Some(link) = &st.link else {
            return;
        };
        while !st.exchange.pipeline.output().is_empty() {
            match link.send(st.exchange.pipeline.output()) {
                Io::Moved(n) => st.exchange.pipeline.sent(n),
                Io::Again => break,
                Io::Closed | Io::Failed => {
                    let why = self.log.quote("send() failed");
                    self.fail(st, RedisError::Io, &why);
                    return;
                }
            }
        }
        if !st.exchange.pipeline.output().is_empty() && !link.want_write() {
            self.fail(
                st,
                RedisError::Io,
                "cannot wait for the socket to be writable",
            );
        }
    }

    /// Reads and dispatches every complete reply; appends the callbacks to
    /// run once the state is released to `ready`.
    fn read(&self, st: &mut State, ready: &mut Vec<(OnReply, Reply)>) {
        if st.phase != Phase::Open {
            return;
        }
        let Some(link) = &st.link else {
            return;
        };
        loop {
            let input = st.exchange.pipeline.input();
            input.reserve(READ_CHUNK);
            let why = match link.recv(input) {
                Io::Moved(_) => {
                    if let Err((kind, why)) = st.exchange.dispatch(&self.settings, ready) {
                        self.fail(st, kind, &why);
                        return;
                    }
                    if !st.exchange.pipeline.output().is_empty() {
                        // NOSCRIPT: the EVAL goes out with the next flush.
                        self.flush_ev.post();
                    }
                    self.arm_deadline(st);
                    // (Drained: no receive just to be told `Again`.)
                    if !link.may_read_more() {
                        break;
                    }
                    continue;
                }
                Io::Again => break,
                Io::Closed if st.exchange.pipeline.is_idle() && st.exchange.is_healthy() => {
                    // Redis closed an idle connection (e.g. its `timeout`):
                    // reconnect on the next request, nothing to report.
                    self.disconnect(st);
                    return;
                }
                Io::Closed => "connection closed by Redis",
                Io::Failed => "recv() failed",
            };
            let why = self.log.quote(why);
            self.fail(st, RedisError::Io, &why);
            return;
        }
        if !link.want_read() {
            self.fail(
                st,
                RedisError::Io,
                "cannot wait for the socket to be readable",
            );
        }
    }

    /// Redis's health is the node's: a worker stands in while another found
    /// Redis down, and returns at once when another finds it back. (Asked
    /// several times a request, and almost always nothing new: the check
    /// is inline, the following not.)
    #[inline(always)]
    fn follow_node(&self, st: &mut State) {
        let follow = st.exchange.follow_node();
        if follow != Follow::Stay {
            self.follow_change(st, follow);
        }
    }

    #[inline(never)]
    fn follow_change(&self, st: &mut State, follow: Follow) {
        match follow {
            Follow::Stay => {}
            Follow::StandIn => {
                self.disconnect(st);
                if !st.exchange.is_shutting_down() {
                    let why = "another worker of this node found it unavailable";
                    let backoff_ms = st.exchange.failed(why, &self.settings);
                    if !self.reconnect_ev.timer_set() {
                        self.reconnect_ev.add_timer(backoff_ms as ngx_msec_t);
                    }
                }
            }
            Follow::Return => {
                st.exchange.rejoin();
                self.reconnect_ev.del_timer();
                if st.phase == Phase::Disconnected {
                    self.connect(st);
                }
            }
        }
    }

    /// Redis failed: answer every slot with `None` (the fallback decides),
    /// close, log the transition once, and retry later.
    fn fail(&self, st: &mut State, kind: RedisError, reason: &str) {
        metrics::redis_error(kind);
        if kind == RedisError::Timeout {
            if let Some(link) = &st.link {
                link.reset_on_close();
            }
        }
        self.disconnect(st);
        // A name is asked again before the next attempt (the address may
        // have moved).
        self.names.ask_again();
        if st.exchange.is_shutting_down() {
            return;
        }
        let backoff_ms = st.exchange.failed(reason, &self.settings);
        if !self.reconnect_ev.timer_set() {
            self.reconnect_ev.add_timer(backoff_ms as ngx_msec_t);
        }
    }

    /// Closes the socket and fails what was pending (callbacks are queued
    /// onto the flush event's run, never called while borrowed).
    fn disconnect(&self, st: &mut State) {
        if let Some(link) = st.link.take() {
            link.close();
        }
        st.phase = Phase::Disconnected;
        let failed = st.exchange.abandon(&self.settings);
        if !failed.is_empty() {
            if let Ok(mut queued) = self.failed.try_borrow_mut() {
                queued.extend(failed);
            }
            // (Always posted: `events::write_handler` runs nothing deferred
            // while the connection is open with nothing to send, counting
            // on this event to run the failed callbacks queued here.)
            self.flush_ev.post();
        }
        self.deadline_ev.del_timer();
    }

    /// The worker is leaving: close, fail what waits, never reconnect.
    fn close_for_exit(&self, st: &mut State) {
        st.exchange.shut_down();
        self.disconnect(st);
        self.names.cancel();
        for ev in [&self.flush_ev, &self.deadline_ev, &self.reconnect_ev] {
            ev.cancel();
        }
    }
}

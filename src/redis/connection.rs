//! One client's socket on nginx's event loop: connected with
//! `ngx_event_connect_peer` (the outcome read with `SO_ERROR`), secured
//! with the TLS handshake of `tls`, then bytes sent from and received into
//! the client's pipeline until it fails or the worker exits. What nginx
//! calls and the timers are `events`; what the bytes mean is `client` and
//! `pipeline`.
//! - a timeout, a reply that is not one of ours or a disconnect fails every
//!   slot at once, closes the connection and schedules a reconnect with
//!   back-off on a cancelable timer; it is logged once per outage, quoting
//!   OpenSSL's reason with TLS;
//! - Redis closing an idle connection is not a failure: the next command
//!   connects again.

use core::cell::UnsafeCell;
use core::ptr;

use nginx_sys::{ngx_log_t, ngx_msec_t, ngx_peer_connection_t, NGX_AGAIN, NGX_LOG_CRIT, NGX_OK};

use super::client::{defer_failed, Inner, OnReply, Reply, State};
use super::events::{read_handler, tls_handler, write_handler};
use super::{now, tls};
use pow_shield_core::metrics::{self, RedisError};
use pow_shield_core::redis::health::Failure;
use pow_shield_core::redis::pipeline::READ_CHUNK;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Disconnected,
    /// Waiting for nginx's resolver (a host name, `Settings::resolve`).
    Resolving,
    Connecting,
    /// TLS handshake under way (`rediss://`).
    Securing,
    Open,
}

/// The connection's own log, a copy of the worker's: nginx's per-attempt
/// connect errors are kept below `crit` so a dead Redis logs one line per
/// transition.
pub(super) fn connection_log(cycle_log: *mut ngx_log_t) -> UnsafeCell<ngx_log_t> {
    // SAFETY: cycle_log is the worker's live log; we take a copy of it.
    let mut log = unsafe { ptr::read(cycle_log) };
    log.log_level = log.log_level.min(NGX_LOG_CRIT as usize);
    log.handler = None;
    log.data = ptr::null_mut();
    UnsafeCell::new(log)
}

impl Inner {
    /// Connects: resolves the host name first when it needs it.
    pub(super) fn connect(&self, st: &mut State) {
        if self.needs_resolving() {
            self.start_resolve(st, false);
            return;
        }
        self.connect_to(st);
    }

    /// Starts a non-blocking connect, with the handshake queued first.
    pub(super) fn connect_to(&self, st: &mut State) {
        let s = &self.settings;
        let resolved = self.resolved.borrow();
        let addr = match (&s.resolve, resolved.as_ref()) {
            (Some(_), Some(resolved)) => resolved.addr.ngx_addr_ref(),
            _ => s.addr,
        };
        drop(resolved);
        // SAFETY: a zeroed peer connection is its initial state; the address
        // and name point at memory that outlives the connection (the
        // configuration's, or the client's resolved address, replaced only
        // once this connection is closed).
        let mut pc: ngx_peer_connection_t = unsafe { core::mem::zeroed() };
        pc.sockaddr = addr.sockaddr;
        pc.socklen = addr.socklen;
        // nginx reads the name only while connecting (its log lines).
        let mut name = addr.name;
        pc.name = &mut name;
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
    pub(super) fn established(&self, st: &mut State) {
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
    pub(super) fn secured(&self, st: &mut State) {
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
    pub(super) fn flush(&self, st: &mut State) {
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
    pub(super) fn read(&self, st: &mut State) -> Vec<(OnReply, Reply)> {
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

    /// Redis failed: answer every slot with `None` (the fallback decides),
    /// close, log the transition once, and retry later.
    pub(super) fn fail(&self, st: &mut State, kind: RedisError, reason: &str) {
        metrics::redis_error(kind);
        if kind == RedisError::Timeout {
            abort_on_close(st.conn);
        }
        self.disconnect(st);
        // A name is asked again before the next attempt (the address may
        // have moved).
        self.re_resolve.set(true);
        if st.shutting_down {
            return;
        }
        let (failure, backoff_ms) = st.health.failed(now() as u64);
        // An outage of this peer that an earlier connection logged.
        let known = failure == Failure::Started
            && self
                .settings
                .outage
                .as_ref()
                .is_some_and(|o| o.replace(true));
        if failure == Failure::Started && !known {
            st.update_gauge();
            // A sentinel's outage decides no request: the next one is asked.
            let meaning = if self.settings.outage.is_some() {
                "the other sentinels are asked"
            } else {
                "requests are decided by \"pow_shield_fail\" until it recovers"
            };
            error!(
                self.cycle_log,
                "pow_shield: redis {} unavailable ({reason}); {meaning}", self.settings.name
            );
        } else {
            if known {
                st.update_gauge();
            }
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
    pub(super) fn disconnect(&self, st: &mut State) {
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
            defer_failed(failed);
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
    pub(super) fn close_for_exit(&self, st: &mut State) {
        st.shutting_down = true;
        st.update_gauge();
        self.disconnect(st);
        self.cancel_resolve();
        self.cancel_events();
    }

    /// The non-blocking connect finished: did it succeed?
    pub(super) fn on_connected(&self, st: &mut State) {
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

/// Makes closing `conn` reset it (`SO_LINGER` 0): commands Redis has not
/// read yet (a stalled or stopped Redis) are dropped by its kernel with the
/// connection instead of running once it wakes up. The fallback answered
/// those requests; Redis must not count them too (a strike, a window
/// entry, a spend the client never got).
fn abort_on_close(conn: *mut nginx_sys::ngx_connection_t) {
    if conn.is_null() {
        return;
    }
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a live connection of ours; setsockopt reads `linger` only
    // during the call. A failure just leaves the orderly close.
    unsafe {
        libc::setsockopt(
            (*conn).fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            core::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

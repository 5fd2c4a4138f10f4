//! The socket of one Redis connection, and its log: what nginx's
//! connection functions do, without knowing what the bytes mean or what a
//! failure decides (`connection` does). Connected with
//! `ngx_event_connect_peer` (the outcome read with `SO_ERROR`), secured
//! with the TLS handshake of `tls`, then bytes in and out, never blocking;
//! every failure is a reason for the log.

use core::cell::{RefCell, UnsafeCell};
use core::ffi::c_void;
use core::ptr;

use nginx_sys::{
    ngx_addr_t, ngx_connection_t, ngx_event_t, ngx_log_t, ngx_peer_connection_t, ngx_ssl_t,
    ngx_uint_t, NGX_AGAIN, NGX_LOG_CRIT, NGX_LOG_INFO, NGX_OK,
};

use super::tls::{self, PeerName};
use pow_shield_core::redis::health::log_message;

/// What nginx calls for the socket: its read and write events, and the end
/// of its TLS handshake.
#[derive(Clone, Copy)]
pub(super) struct Handlers {
    pub(super) read: unsafe extern "C" fn(*mut ngx_event_t),
    pub(super) write: unsafe extern "C" fn(*mut ngx_event_t),
    pub(super) secured: unsafe extern "C" fn(*mut ngx_connection_t),
}

/// An open (or opening) connection; `close` ends it.
pub(super) struct Link {
    conn: *mut ngx_connection_t,
    handlers: Handlers,
}

/// What a send or receive did.
pub(super) enum Io {
    /// This many bytes moved.
    Moved(usize),
    /// The socket would block: nginx calls again when it is ready.
    Again,
    /// The peer closed the connection (receive only).
    Closed,
    Failed,
}

/// Where a TLS handshake stands.
pub(super) enum Handshake {
    /// Under way: nginx calls `Handlers::secured` when it ends.
    Again,
    Done,
    Failed,
}

impl Link {
    /// Starts a non-blocking connect to `addr`; the connection's events
    /// carry `data` to `handlers`. `Ok(true)`: connected already.
    ///
    /// `addr` points at memory that outlives the connection, and `log` and
    /// `data` live as long as it.
    pub(super) fn connect(
        addr: ngx_addr_t,
        log: *mut ngx_log_t,
        data: *mut c_void,
        handlers: Handlers,
    ) -> Result<(Link, bool), String> {
        // SAFETY: a zeroed peer connection is its initial state; the address
        // and name point at memory that outlives the connection (per the
        // contract above).
        let mut pc: ngx_peer_connection_t = unsafe { core::mem::zeroed() };
        pc.sockaddr = addr.sockaddr;
        pc.socklen = addr.socklen;
        // nginx reads the name only while connecting (its log lines).
        let mut name = addr.name;
        pc.name = &mut name;
        pc.get = Some(nginx_sys::ngx_event_get_peer);
        pc.log = log;
        pc.tries = 1;
        pc.set_log_error(nginx_sys::ngx_connection_log_error_e_NGX_ERROR_INFO);
        // SAFETY: pc is fully initialised for a plain TCP/unix connect.
        let rc = unsafe { nginx_sys::ngx_event_connect_peer(&mut pc) };
        let err = nginx_sys::ngx_socket_errno();
        if pc.connection.is_null() || !(rc == NGX_OK as isize || rc == NGX_AGAIN as isize) {
            return Err(format!(
                "connect() failed: {}",
                std::io::Error::from_raw_os_error(err)
            ));
        }
        let c = pc.connection;
        // SAFETY: a fresh connection from nginx; we own it until we close it.
        unsafe { (*c).data = data };
        let link = Link { conn: c, handlers };
        link.take_events();
        Ok((link, rc == NGX_OK as isize))
    }

    /// Points the connection's read and write events at our handlers.
    fn take_events(&self) {
        // SAFETY: our connection; its events are nginx's, their handlers ours.
        unsafe {
            (*(*self.conn).read).handler = Some(self.handlers.read);
            (*(*self.conn).write).handler = Some(self.handlers.write);
        }
    }

    pub(super) fn is(&self, c: *mut ngx_connection_t) -> bool {
        self.conn == c
    }

    /// The outcome of the non-blocking connect.
    pub(super) fn connected(&self) -> Result<(), String> {
        let mut err: libc::c_int = 0;
        let mut len = core::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: our connecting socket; SO_ERROR reads its result.
        let rc = unsafe {
            libc::getsockopt(
                (*self.conn).fd,
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
            return Err(format!(
                "connect() failed: {}",
                std::io::Error::from_raw_os_error(err)
            ));
        }
        Ok(())
    }

    /// Starts TLS on the connected socket (SNI for `name`).
    pub(super) fn start_tls(&self, ssl: *mut ngx_ssl_t, name: &PeerName) -> Result<(), String> {
        // SAFETY: our freshly connected socket, without TLS yet.
        unsafe { tls::attach(self.conn, ssl, name) }
    }

    /// Drives the TLS handshake.
    pub(super) fn handshake(&self) -> Handshake {
        let c = self.conn;
        // SAFETY: our connection with TLS attached; never blocks.
        let rc = unsafe { nginx_sys::ngx_ssl_handshake(c) };
        if rc == NGX_AGAIN as isize {
            // SAFETY: as above; nginx calls it once the handshake ends.
            unsafe { (*(*c).ssl).handler = Some(self.handlers.secured) };
            return Handshake::Again;
        }
        if rc == NGX_OK as isize {
            Handshake::Done
        } else {
            Handshake::Failed
        }
    }

    /// The handshake ended: whether it completed.
    pub(super) fn handshaked(&self) -> bool {
        let c = self.conn;
        // SAFETY: our connection; `handshaked` says the handshake completed.
        unsafe { !(*c).ssl.is_null() && (*(*c).ssl).handshaked() != 0 }
    }

    /// After a completed handshake: the certificate chain and `name`.
    pub(super) fn verify(&self, name: &PeerName) -> Result<(), String> {
        // SAFETY: the handshake completed.
        unsafe { tls::verify(self.conn, name) }
    }

    /// After the handshake: nginx's handshake handlers step aside for ours.
    pub(super) fn secured(&self) {
        self.take_events();
    }

    /// Sends from `out`, as far as the socket takes it in one call.
    pub(super) fn send(&self, out: &[u8]) -> Io {
        let c = self.conn;
        // SAFETY: c is our open connection; send only reads from our
        // buffer (nginx's signature takes a mutable pointer).
        let n = unsafe {
            match (*c).send {
                Some(send) => send(c, out.as_ptr().cast_mut(), out.len()),
                None => -1,
            }
        };
        match n {
            n if n > 0 => Io::Moved(n as usize),
            n if n == NGX_AGAIN as isize => Io::Again,
            _ => Io::Failed,
        }
    }

    /// Receives into the spare capacity of `input`.
    pub(super) fn recv(&self, input: &mut Vec<u8>) -> Io {
        let c = self.conn;
        let spare = input.spare_capacity_mut();
        // SAFETY: recv writes at most spare.len() bytes into our buffer.
        let n = unsafe {
            match (*c).recv {
                Some(recv) => recv(c, spare.as_mut_ptr().cast(), spare.len()),
                None => -1,
            }
        };
        match n {
            n if n > 0 => {
                // SAFETY: recv initialised n bytes of the spare capacity.
                unsafe { input.set_len(input.len() + n as usize) };
                Io::Moved(n as usize)
            }
            0 => Io::Closed,
            n if n == NGX_AGAIN as isize => Io::Again,
            _ => Io::Failed,
        }
    }

    /// Asks to be told when the socket is writable again.
    pub(super) fn want_write(&self) -> bool {
        // SAFETY: our open connection.
        unsafe { nginx_sys::ngx_handle_write_event((*self.conn).write, 0) == NGX_OK as isize }
    }

    /// Whether a receive may find more now: nginx's word after the last
    /// one (a read that did not fill the room it had drained the socket,
    /// and TLS's buffers with it); not ready, the next would be `Again`.
    pub(super) fn may_read_more(&self) -> bool {
        // SAFETY: our open connection; nginx's flag, read between its calls.
        unsafe { (*(*self.conn).read).ready() != 0 }
    }

    /// Keeps the read event armed.
    pub(super) fn want_read(&self) -> bool {
        // SAFETY: our open connection.
        unsafe { nginx_sys::ngx_handle_read_event((*self.conn).read, 0) == NGX_OK as isize }
    }

    /// Makes closing reset the connection (`SO_LINGER` 0): commands Redis
    /// has not read yet (a stalled or stopped Redis) are dropped by its
    /// kernel with the connection instead of running once it wakes up. The
    /// fallback answered those requests; Redis must not count them too (a
    /// strike, a window entry, a spend the client never got).
    pub(super) fn reset_on_close(&self) {
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: a live connection of ours; setsockopt reads `linger` only
        // during the call. A failure just leaves the orderly close.
        unsafe {
            libc::setsockopt(
                (*self.conn).fd,
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                core::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
    }

    /// Closes the connection (its TLS state and nginx's events and timers
    /// with it).
    pub(super) fn close(self) {
        // SAFETY: our connection; TLS state goes first, then nginx
        // removes its events and timers, then the TLS pool goes.
        unsafe {
            tls::detach(self.conn);
            let pool = (*self.conn).pool;
            nginx_sys::ngx_close_connection(self.conn);
            tls::free_pool(pool);
        }
    }
}

/// A connection's own log, a copy of the worker's: nginx's per-attempt
/// connect errors are kept below `crit` so a dead Redis logs one line per
/// transition. With TLS it keeps the last line (OpenSSL's reason for a
/// failure), quoted in ours instead of logged on every attempt.
pub(super) struct ConnLog {
    log: UnsafeCell<ngx_log_t>,
    /// The worker's log, for our own lines.
    cycle_log: *mut ngx_log_t,
    last_error: RefCell<String>,
}

impl ConnLog {
    pub(super) fn new(cycle_log: *mut ngx_log_t) -> ConnLog {
        // SAFETY: cycle_log is the worker's live log; we take a copy of it.
        let mut log = unsafe { ptr::read(cycle_log) };
        log.log_level = log.log_level.min(NGX_LOG_CRIT as usize);
        log.handler = None;
        log.data = ptr::null_mut();
        ConnLog {
            log: UnsafeCell::new(log),
            cycle_log,
            last_error: RefCell::new(String::new()),
        }
    }

    /// Keeps the last line (for TLS connections); once, at this log's
    /// final address, before nginx knows it.
    pub(super) fn capture(&self) {
        // SAFETY: our log, not yet known to nginx; `wdata` is this log,
        // which outlives every connection that writes to it.
        unsafe {
            let log = self.log.get();
            (*log).log_level = NGX_LOG_INFO as usize;
            (*log).writer = Some(capture_writer);
            (*log).wdata = ptr::from_ref(self).cast_mut().cast();
            (*log).next = ptr::null_mut();
        }
    }

    pub(super) fn get(&self) -> *mut ngx_log_t {
        self.log.get()
    }

    /// The worker's log, for our own lines.
    pub(super) fn worker(&self) -> *mut ngx_log_t {
        self.cycle_log
    }

    /// A new connection: no reason kept yet.
    pub(super) fn clear(&self) {
        self.last_error.borrow_mut().clear();
    }

    /// `what`, with OpenSSL's reason if the connection logged one.
    pub(super) fn quote(&self, what: &str) -> String {
        let last = core::mem::take(&mut *self.last_error.borrow_mut());
        if last.is_empty() {
            what.to_owned()
        } else {
            format!("{what}: {last}")
        }
    }
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
        // SAFETY: nginx passes the formatted line; wdata is our ConnLog.
        let (conn_log, line) = unsafe {
            (
                &*(*log).wdata.cast::<ConnLog>(),
                core::slice::from_raw_parts(buf, len),
            )
        };
        let line = String::from_utf8_lossy(line);
        let message = log_message(&line);
        if level <= NGX_LOG_CRIT as ngx_uint_t {
            log_at!(level, conn_log.cycle_log, "{message}");
        }
        if let Ok(mut last) = conn_log.last_error.try_borrow_mut() {
            last.clear();
            last.push_str(message);
        }
    })
}

//! What nginx calls for a connection (its events, its socket's, the end
//! of a TLS handshake), each behind the panic guard; each runs the
//! callbacks of the slots a disconnect failed (`Connection::run_deferred`)
//! once the connection's state is released (`run_failed`, `run_deferred`,
//! here too).

use core::ffi::c_void;

use nginx_sys::{ngx_connection_t, ngx_event_t};

use super::{Connection, Phase};
use crate::redis::exchange::{OnReply, Reply};

/// Recovers the connection from an event's data.
///
/// # Safety
/// `data` is a `Connection` pointer set by `attach_events` or `connect_to`,
/// alive while its events or socket are registered with nginx.
unsafe fn connection<'a>(data: *mut c_void) -> &'a Connection {
    // SAFETY: per the contract.
    unsafe { &*data.cast::<Connection>() }
}

pub(super) unsafe extern "C" fn flush_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: our flush event carries the connection.
        let c = unsafe { connection((*ev).data) };
        c.with_state(|c, st| c.flush(st));
        c.run_deferred();
    })
}

pub(super) unsafe extern "C" fn deadline_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: our deadline event carries the connection.
        let c = unsafe { connection((*ev).data) };
        c.with_state(|c, st| c.on_deadline(st));
        c.run_deferred();
    })
}

pub(super) unsafe extern "C" fn reconnect_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: our reconnect event carries the connection; exiting
        // workers don't reconnect.
        let (c, exiting) = unsafe {
            (
                connection((*ev).data),
                nginx_sys::ngx_exiting != 0 || nginx_sys::ngx_terminate != 0,
            )
        };
        if exiting {
            return;
        }
        c.with_state(|c, st| {
            if let Some(answer) = c.names.take_answer() {
                c.on_resolved(st, answer);
            } else if st.phase == Phase::Disconnected {
                c.connect(st);
            }
        });
        c.run_deferred();
    })
}

pub(super) unsafe extern "C" fn write_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: socket events carry the socket, whose data is ours.
        let c = unsafe { connection((*(*ev).data.cast::<ngx_connection_t>()).data) };
        let acted = c.with_state(|c, st| {
            if st.phase == Phase::Connecting {
                c.on_connected(st);
            } else if st.phase == Phase::Open && st.exchange.pipeline.output().is_empty() {
                // Writable with nothing to send (epoll tells so with every
                // reply read): nothing changed, nothing deferred to run.
                return false;
            } else {
                c.flush(st);
            }
            true
        });
        if acted != Some(false) {
            c.run_deferred();
        }
    })
}

pub(super) unsafe extern "C" fn read_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: as in write_handler.
        let socket = unsafe { (*ev).data.cast::<ngx_connection_t>() };
        // SAFETY: as above.
        let (c, closing) = unsafe { (connection((*socket).data), (*socket).close() != 0) };
        // The list of the last read (emptied, its room kept): none made a
        // read. A callback that reads this connection again (never: they
        // only queue) would find it taken and make its own.
        let mut ready = c.ready.take();
        c.with_state(|c, st| {
            if closing {
                // nginx is shutting the worker down (worker_shutdown_timeout).
                c.close_for_exit(st);
                return;
            }
            if st.phase == Phase::Connecting {
                c.on_connected(st);
            }
            c.read(st, &mut ready);
        });
        // (Taken from the end in the order they came: measured, a drain
        // cost some 20 instructions a read more, a second pass to give
        // the replies back as many.)
        ready.reverse();
        while let Some((on_reply, reply)) = ready.pop() {
            // Each on its own: a bug in one must not strand the other requests.
            crate::ffi::guard((), || on_reply.run(&reply));
            // Read: a script answer's box holds a later one.
            c.with_state(|_, st| st.exchange.pipeline.give_back(reply));
        }
        ready.shrink_to(crate::redis::exchange::KEPT_ROOM);
        c.ready.set(ready);
        c.run_deferred();
    })
}

/// nginx's TLS handshake handler calls this when the handshake ends, done
/// or failed.
pub(super) unsafe extern "C" fn tls_handler(socket: *mut ngx_connection_t) {
    crate::ffi::guard((), || {
        // SAFETY: our socket, whose data is the connection.
        let c = unsafe { connection((*socket).data) };
        c.with_state(|c, st| {
            let ours = st.link.as_ref().is_some_and(|link| link.is(socket));
            if st.phase == Phase::Securing && ours {
                c.secured(st);
            }
        });
        c.run_deferred();
    })
}

/// What runs once a connection's state is released.
impl Connection {
    /// Answers the slots a disconnect failed with `Reply::Failed`. (Asked
    /// after every event of the connection, and almost always none: the
    /// check is inline, the answering not.)
    #[inline(always)]
    pub(super) fn run_failed(&self) {
        let failed = match self.failed.try_borrow_mut() {
            Ok(mut failed) if !failed.is_empty() => core::mem::take(&mut *failed),
            _ => return,
        };
        Self::answer_failed(failed);
    }

    #[inline(never)]
    fn answer_failed(failed: Vec<OnReply>) {
        for on_reply in failed {
            // Each on its own: a bug in one must not strand the other requests.
            crate::ffi::guard((), || on_reply.run(&Reply::Failed));
        }
    }

    /// What runs once the state is released: failed slots, then `on_ready`.
    pub(super) fn run_deferred(&self) {
        self.run_failed();
        let ready = self
            .state
            .try_borrow_mut()
            .is_ok_and(|mut st| st.exchange.take_ready());
        if ready {
            if let Some(on_ready) = &self.settings.on_ready {
                on_ready();
            }
        }
    }
}

//! What nginx calls for a client: the socket's read and write handlers,
//! the TLS handshake's end, the connection log's writer, and the client's
//! three events: the posted flush (one send per loop iteration for every
//! command queued in it), the deadline timer on the oldest pending reply,
//! and the cancelable reconnect timer. Every entry runs behind the panic
//! guard; the requests' callbacks run once the client's state is released,
//! each guarded on its own.

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::ptr;

use nginx_sys::{
    ngx_connection_t, ngx_event_t, ngx_log_t, ngx_msec_t, ngx_uint_t, NGX_LOG_CRIT, NGX_LOG_INFO,
};

use super::client::{Inner, State};
use super::connection::Phase;
use super::now;
use pow_shield_core::metrics::RedisError;
use pow_shield_core::redis::health::log_message;

/// An event nginx does not know yet.
pub(super) fn idle_event() -> UnsafeCell<ngx_event_t> {
    // SAFETY: a zeroed ngx_event_t is nginx's initial event state.
    UnsafeCell::new(unsafe { core::mem::zeroed() })
}

impl Inner {
    /// Points the client's events (and with TLS its log) at it; called
    /// once, at its final address, before nginx knows any of them.
    pub(super) fn attach_events(&self) {
        let data: *mut c_void = ptr::from_ref::<Inner>(self).cast_mut().cast();
        if self.settings.tls.is_some() {
            // SAFETY: our log, not yet known to nginx; `data` outlives it.
            unsafe {
                let log = self.log.get();
                (*log).log_level = NGX_LOG_INFO as usize;
                (*log).writer = Some(capture_writer);
                (*log).wdata = data;
                (*log).next = ptr::null_mut();
            }
        }
        for (ev, handler) in [
            (
                self.flush_ev.get(),
                flush_handler as unsafe extern "C" fn(*mut ngx_event_t),
            ),
            (self.deadline_ev.get(), deadline_handler),
            (self.reconnect_ev.get(), reconnect_handler),
        ] {
            // SAFETY: the events are ours and not yet known to nginx.
            unsafe {
                (*ev).data = data;
                (*ev).handler = Some(handler);
                (*ev).log = self.log.get();
            }
        }
        // Reconnect timers must not hold a worker that is shutting down.
        // SAFETY: as above.
        unsafe { (*self.reconnect_ev.get()).set_cancelable(1) };
    }

    /// Milliseconds until the reconnect timer fires (0 if it is not set).
    pub(super) fn reconnect_in_ms(&self) -> u64 {
        // SAFETY: reading our own event's timer fields.
        let ev = unsafe { &*self.reconnect_ev.get() };
        if ev.timer_set() == 0 {
            return 0;
        }
        // Signed: in the loop iteration where it is due, the timer is still
        // set but already in the past.
        ((ev.timer.key as ngx_msec_t).wrapping_sub(now()) as i64).max(0) as u64
    }

    /// Takes the events out of nginx's timers and posted queue.
    pub(super) fn cancel_events(&self) {
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

    /// Runs the reconnect event's handler soon (a resolver's answer).
    pub(super) fn post_reconnect(&self) {
        // SAFETY: our reconnect event; posting is idempotent while queued.
        unsafe {
            let ev = self.reconnect_ev.get();
            if (*ev).posted() == 0 {
                nginx_sys::ngx_post_event(ev, ptr::addr_of_mut!(nginx_sys::ngx_posted_events));
            }
        }
    }

    /// Sends what is queued once this loop iteration's events are handled.
    pub(super) fn post_flush(&self) {
        // SAFETY: our flush event; posting is idempotent while queued.
        unsafe {
            let ev = self.flush_ev.get();
            if (*ev).posted() == 0 {
                nginx_sys::ngx_post_event(ev, ptr::addr_of_mut!(nginx_sys::ngx_posted_events));
            }
        }
    }

    /// Keeps the deadline timer on the oldest pending reply.
    pub(super) fn arm_deadline(&self, st: &State) {
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

    /// The deadline timer fired: fails the connection if the oldest reply
    /// is overdue, else waits for it.
    pub(super) fn on_deadline(&self, st: &mut State) {
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
}

/// Recovers the client from an event's data.
///
/// # Safety
/// `data` is an `Inner` pointer set by `attach_events` or `connect`, alive
/// while its events or connection are registered with nginx.
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
            let answer = inner
                .resolution
                .try_borrow_mut()
                .ok()
                .and_then(|mut a| a.take());
            if let Some(answer) = answer {
                inner.on_resolved(st, answer);
            } else if st.phase == Phase::Disconnected {
                inner.connect(st);
            }
        });
        inner.run_deferred();
    })
}

pub(super) unsafe extern "C" fn write_handler(ev: *mut ngx_event_t) {
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

pub(super) unsafe extern "C" fn read_handler(ev: *mut ngx_event_t) {
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
pub(super) unsafe extern "C" fn tls_handler(c: *mut ngx_connection_t) {
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

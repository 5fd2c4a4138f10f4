//! An nginx event that Rust owns (a client's flush, deadline and reconnect
//! events): nginx writes its timer and posted flags through a raw pointer,
//! so it lives in an `UnsafeCell`, at an address that does not move while
//! nginx knows it.

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::ptr;

use nginx_sys::{ngx_event_t, ngx_log_t, ngx_msec_t};
use pow_shield_core::redis::deadline;

use super::now;

pub(super) struct Event(UnsafeCell<ngx_event_t>);

impl Event {
    /// An event nginx does not know yet.
    pub(super) fn idle() -> Event {
        // SAFETY: a zeroed ngx_event_t is nginx's initial event state.
        Event(UnsafeCell::new(unsafe { core::mem::zeroed() }))
    }

    /// Gives the event its handler, the handler's `data` and a log; once,
    /// at the event's final address, before nginx knows it.
    pub(super) fn attach(
        &self,
        data: *mut c_void,
        handler: unsafe extern "C" fn(*mut ngx_event_t),
        log: *mut ngx_log_t,
    ) {
        // SAFETY: our event, not yet known to nginx.
        unsafe {
            let ev = self.0.get();
            (*ev).data = data;
            (*ev).handler = Some(handler);
            (*ev).log = log;
        }
    }

    /// Whether its timer may be left behind by a worker that is shutting
    /// down (nginx waits only for timers that are not).
    pub(super) fn set_cancelable(&self, cancelable: bool) {
        // SAFETY: our event; nginx reads the flag only when an exiting
        // worker looks for timers to wait for, never while we run.
        unsafe { (*self.0.get()).set_cancelable(u32::from(cancelable)) };
    }

    /// Runs the handler once this loop iteration's events are handled;
    /// posting is idempotent while queued.
    pub(super) fn post(&self) {
        // SAFETY: our event; nginx's posted queue of this worker.
        unsafe {
            let ev = self.0.get();
            if (*ev).posted() == 0 {
                nginx_sys::ngx_post_event(ev, ptr::addr_of_mut!(nginx_sys::ngx_posted_events));
            }
        }
    }

    pub(super) fn timer_set(&self) -> bool {
        // SAFETY: reading our own event's flag.
        unsafe { (*self.0.get()).timer_set() != 0 }
    }

    /// Sets (or moves) the timer to fire in `ms`.
    pub(super) fn add_timer(&self, ms: ngx_msec_t) {
        // SAFETY: our event; nginx owns the timer tree.
        unsafe { nginx_sys::ngx_add_timer(self.0.get(), ms) };
    }

    /// Makes the timer fire in `ms` at the latest: one that fires sooner
    /// is kept (its handler finds what is due then), unlike `add_timer`,
    /// which keeps one up to nginx's lazy delay later.
    pub(super) fn fire_within(&self, ms: ngx_msec_t) {
        // SAFETY: our event, at a fixed address for the connection's life,
        // on the worker's one thread; its timer's key is read, and the
        // timer deleted, only while it is set (in nginx's timer tree).
        unsafe {
            let ev = self.0.get();
            if (*ev).timer_set() != 0 {
                let due = nginx_sys::ngx_current_msec.wrapping_add(ms);
                // (The kept one may be in the past already.)
                if deadline::fires_by((*ev).timer.key, due) {
                    return;
                }
                nginx_sys::ngx_del_timer(ev);
            }
            nginx_sys::ngx_add_timer(ev, ms);
        }
    }

    pub(super) fn del_timer(&self) {
        if self.timer_set() {
            // SAFETY: our event, in nginx's timer tree.
            unsafe { nginx_sys::ngx_del_timer(self.0.get()) };
        }
    }

    /// Milliseconds until the timer fires (0 if it is not set).
    pub(super) fn ms_left(&self) -> u64 {
        if !self.timer_set() {
            return 0;
        }
        // SAFETY: reading our own event's timer key.
        let key = unsafe { (*self.0.get()).timer.key };
        // Signed: in the loop iteration where it is due, the timer is still
        // set but already in the past.
        ((key as ngx_msec_t).wrapping_sub(now()) as i64).max(0) as u64
    }

    /// Takes the event out of nginx's timers and posted queue (before it
    /// goes away).
    pub(super) fn cancel(&self) {
        self.del_timer();
        // SAFETY: our event; removed from the posted queue it is in.
        unsafe {
            let ev = self.0.get();
            if (*ev).posted() != 0 {
                nginx_sys::ngx_delete_posted_event(ev);
            }
        }
    }
}

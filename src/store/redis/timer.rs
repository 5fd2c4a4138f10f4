//! The batch timer (`pow_shield_core::cluster::node`, `tick`): an nginx
//! event at a fixed address, armed as the node's `Step::Timer` says, and
//! the fresh monotonic clock the node reads.

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::ptr;

use nginx_sys::{ngx_event_t, ngx_log_t, ngx_msec_t};

use super::RedisStore;
use crate::ffi::monotonic_ms;

/// The batch timer: an nginx event at a fixed address.
pub(super) struct BatchTimer(Box<UnsafeCell<ngx_event_t>>);

impl BatchTimer {
    pub(super) fn new() -> Self {
        // SAFETY: a zeroed ngx_event_t is nginx's initial event state.
        Self(Box::new(UnsafeCell::new(unsafe { core::mem::zeroed() })))
    }

    fn ev(&self) -> *mut ngx_event_t {
        self.0.get()
    }

    /// Points the timer at `store` (at its final address).
    pub(super) fn attach(&self, store: &RedisStore, log: *mut ngx_log_t) {
        let ev = self.ev();
        // SAFETY: our event, not yet known to nginx; `data` is the store,
        // which cancels the timer before it goes away (`shutdown`, `Drop`).
        unsafe {
            (*ev).data = ptr::from_ref::<RedisStore>(store)
                .cast_mut()
                .cast::<c_void>();
            (*ev).handler = Some(batch_handler);
            (*ev).log = log;
        }
    }

    /// Runs the timer in `ms` (`if_unset`: unless it is set already);
    /// `cancelable`: it does not hold a worker that exits.
    pub(super) fn arm(&self, ms: u64, if_unset: bool, cancelable: bool) {
        let ev = self.ev();
        // SAFETY: our event (attached); nginx reads `cancelable` only when
        // an exiting worker looks for timers to wait for; adding a timer
        // only queues it (moving it if it was set).
        unsafe {
            if if_unset && (*ev).timer_set() != 0 {
                return;
            }
            (*ev).set_cancelable(u32::from(cancelable));
            nginx_sys::ngx_add_timer(ev, ms as ngx_msec_t);
        }
    }

    /// Stops the timer (the store goes away).
    pub(super) fn cancel(&self) {
        // SAFETY: our own event; removed from nginx's timers before its
        // store (its `data`) goes away.
        unsafe {
            if (*self.ev()).timer_set() != 0 {
                nginx_sys::ngx_del_timer(self.ev());
            }
        }
    }
}

/// The monotonic clock read now, not the loop iteration's cached time
/// (the one nginx's `ngx_current_msec` reads, `CLOCK_MONOTONIC`): a local
/// refusal must end at `T` even late in a long iteration.
pub(super) fn fresh_monotonic_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out pointer; CLOCK_MONOTONIC always exists
    // on the systems nginx runs this module on.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return monotonic_ms();
    }
    (ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64) / 1_000_000
}

/// nginx runs the batch timer.
unsafe extern "C" fn batch_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: `data` is the live store that armed this timer (it
        // cancels the timer before it goes away).
        let store = unsafe { &*(*ev).data.cast::<RedisStore>() };
        // SAFETY: nginx's own flag, written by this process's signal
        // handling between loop iterations; a plain read.
        let exiting = unsafe { nginx_sys::ngx_exiting } != 0;
        store.on_tick(exiting);
    });
}

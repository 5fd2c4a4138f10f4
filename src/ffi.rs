//! Small helpers for the FFI edge: no panic may unwind into nginx; the
//! module's type.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// The module type the `ngx` traits hang off (`PowShield::main_conf(r)`,
/// `PowShield::module()`): here, below every module, so that each can name
/// it without naming the crate root. Its trait impls are the wiring's
/// (src/lib.rs): only the module table knows which `ngx_module_t` and
/// which configuration types it stands for.
pub struct PowShield;

/// Runs `f`, returning `on_panic` if it panics, so that no panic crosses into
/// nginx. A panic is a bug; it is reported on stderr (the error log) by the
/// default hook before we get here.
#[inline]
pub fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// Views an `ngx_str_t` as bytes; null data is the empty slice.
#[inline]
pub fn bytes(s: &nginx_sys::ngx_str_t) -> &[u8] {
    if s.data.is_null() || s.len == 0 {
        return &[];
    }
    // SAFETY: nginx strings point at `len` readable bytes while they live.
    unsafe { core::slice::from_raw_parts(s.data, s.len) }
}

/// Epoch milliseconds from nginx's cached clock (updated once per event
/// loop iteration, like every other time nginx uses for a request).
#[inline]
pub fn now_ms() -> u64 {
    let tp = nginx_sys::ngx_timeofday();
    (tp.sec as u64) * 1000 + tp.msec as u64
}

/// nginx's monotonic milliseconds (`ngx_current_msec`, cached per event loop
/// iteration): one clock in every worker and across reloads, never stepped
/// by a wall-clock change. Local buckets run on it.
#[inline]
pub fn monotonic_ms() -> u64 {
    // SAFETY: nginx updates it only from this (single-threaded) worker's
    // event loop; a plain read.
    unsafe { nginx_sys::ngx_current_msec as u64 }
}

/// Whether process `pid` still exists (`kill(pid, 0)`; a process of
/// another user still counts).
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

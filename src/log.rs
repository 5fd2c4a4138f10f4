//! Logging macros over `ngx::ngx_log_error!` that accept anything with a log
//! pointer (a `*mut ngx_log_t`, a connection, a configuration).

use nginx_sys::ngx_log_t;

pub trait AsLogPtr {
    fn as_log_ptr(&self) -> *mut ngx_log_t;
}

impl AsLogPtr for *mut ngx_log_t {
    fn as_log_ptr(&self) -> *mut ngx_log_t {
        *self
    }
}

impl AsLogPtr for core::ptr::NonNull<ngx_log_t> {
    fn as_log_ptr(&self) -> *mut ngx_log_t {
        self.as_ptr()
    }
}

impl<T: AsLogPtr> AsLogPtr for &T {
    fn as_log_ptr(&self) -> *mut ngx_log_t {
        T::as_log_ptr(self)
    }
}

#[inline(always)]
pub fn as_log_ptr(x: impl AsLogPtr) -> *mut ngx_log_t {
    x.as_log_ptr()
}

/// Logs at an explicit nginx level (`NGX_LOG_*`).
macro_rules! log_at {
    ( $level:expr, $log:expr, $($arg:tt)+ ) => ({
        ngx::ngx_log_error!($level, $crate::log::as_log_ptr(&$log), $($arg)+);
    });
}

macro_rules! error {
    ( $log:expr, $($arg:tt)+ ) => (log_at!(nginx_sys::NGX_LOG_ERR, $log, $($arg)+));
}

macro_rules! notice {
    ( $log:expr, $($arg:tt)+ ) => (log_at!(nginx_sys::NGX_LOG_NOTICE, $log, $($arg)+));
}

macro_rules! debug {
    ( $log:expr, $($arg:tt)+ ) => ({
        ngx::ngx_log_debug!($crate::log::as_log_ptr(&$log), $($arg)+);
    });
}

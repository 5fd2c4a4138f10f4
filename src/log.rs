//! Writing to an nginx log: every call site holds a `*mut ngx_log_t`
//! (the cycle's, a connection's, a zone's or the configuration's).
//!
//! `error!(log, ...)`, `notice!(log, ...)` and `log_at!(level, log, ...)`
//! take `format!` arguments; `debug!(log, ...)` writes only where nginx was
//! built `--with-debug` and the log asks for debug lines.

use core::fmt;

use nginx_sys::{ngx_log_t, ngx_uint_t, NGX_LOG_DEBUG, NGX_LOG_DEBUG_ALL, NGX_MAX_ERROR_STR};

/// What nginx keeps of one message: its line buffer less the time, level
/// and pid prefix it writes first.
const MESSAGE_MAX: usize = NGX_MAX_ERROR_STR as usize - "2026/01/01 00:00:00 [notice] 1#1: ".len();

/// Writes one message at `level` (`NGX_LOG_*`) if the log takes that level.
/// A message longer than nginx keeps is cut at a character boundary.
///
/// # Safety
/// `log` is null or a live nginx log.
pub unsafe fn write(log: *mut ngx_log_t, level: ngx_uint_t, message: fmt::Arguments<'_>) {
    // SAFETY: the caller passes null or a live log.
    let Some(wanted) = (unsafe { log.as_ref() }).map(|l| l.log_level) else {
        return;
    };
    let takes = if level == NGX_LOG_DEBUG as ngx_uint_t {
        ngx::log::DEBUG && wanted & NGX_LOG_DEBUG_ALL as ngx_uint_t != 0
    } else {
        level <= wanted
    };
    if !takes {
        return;
    }
    let mut text = Message {
        buf: [0; MESSAGE_MAX],
        len: 0,
    };
    // A full buffer stops formatting; what was written is still logged.
    let _ = fmt::write(&mut text, message);
    // SAFETY: `log` is live (above); nginx copies the bytes, passed as
    // `%*s` (length and pointer), never as a format string.
    unsafe { ngx::log::log_error(level, log, 0, &text.buf[..text.len]) };
}

/// A message on the stack: no allocation on the request path.
struct Message {
    buf: [u8; MESSAGE_MAX],
    len: usize,
}

impl fmt::Write for Message {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = MESSAGE_MAX - self.len;
        let mut take = s.len().min(room);
        while !s.is_char_boundary(take) {
            take -= 1;
        }
        self.buf[self.len..self.len + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take;
        if take < s.len() {
            return Err(fmt::Error);
        }
        Ok(())
    }
}

/// `log_at!(level, log, "fmt", args...)`: one message at an `NGX_LOG_*` level.
macro_rules! log_at {
    ( $level:expr, $log:expr, $($fmt:tt)+ ) => {{
        let log: *mut nginx_sys::ngx_log_t = $log;
        // SAFETY: every caller passes nginx's live log of its cycle,
        // connection, zone or configuration.
        unsafe {
            $crate::log::write(log, $level as nginx_sys::ngx_uint_t, format_args!($($fmt)+))
        }
    }};
}

macro_rules! error {
    ( $log:expr, $($fmt:tt)+ ) => {
        log_at!(nginx_sys::NGX_LOG_ERR, $log, $($fmt)+)
    };
}

macro_rules! notice {
    ( $log:expr, $($fmt:tt)+ ) => {
        log_at!(nginx_sys::NGX_LOG_NOTICE, $log, $($fmt)+)
    };
}

macro_rules! debug {
    ( $log:expr, $($fmt:tt)+ ) => {
        log_at!(nginx_sys::NGX_LOG_DEBUG, $log, $($fmt)+)
    };
}

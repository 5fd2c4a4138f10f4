//! A connection's one deadline timer: the oldest reply's deadline, and
//! what its firing does.

use nginx_sys::ngx_msec_t;

use super::{Connection, Phase, State};
use crate::redis::now;
use pow_shield_core::metrics::RedisError;

impl Connection {
    /// Keeps the deadline timer firing by the oldest pending reply's
    /// deadline. With nothing pending it is left to fire once for nothing
    /// (measured: taken out of nginx's timers after every reply and put
    /// back for the next command, some 50 instructions a command); one
    /// set sooner than the oldest reply's deadline is kept too, the
    /// deadline handler arming it again. It holds a worker that exits only
    /// while a command of its own waits (a request is answered before the
    /// worker goes), never for a handshake alone or nothing: nginx stops
    /// at once whatever state Redis is in.
    pub(super) fn arm_deadline(&self, st: &State) {
        self.deadline_ev
            .set_cancelable(!st.exchange.pipeline.awaits_commands());
        if let Some(slot) = st.exchange.pipeline.oldest() {
            // Signed: an overdue deadline fires on the next tick.
            let left = ((slot.deadline as ngx_msec_t).wrapping_sub(now()) as i64).max(1);
            self.deadline_ev.fire_within(left as ngx_msec_t);
        }
    }

    /// The deadline timer fired: fails the connection if the oldest reply
    /// is overdue, else waits for it.
    pub(super) fn on_deadline(&self, st: &mut State) {
        let Some(front) = st.exchange.pipeline.oldest() else {
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

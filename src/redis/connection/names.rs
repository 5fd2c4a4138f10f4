//! A connection's host name on nginx's resolver (`resolve::Names`): asked
//! again when its answer runs out while the connection serves, and the
//! answer applied from the reconnect event (connect, move, or fail).

use super::{Connection, Phase, State};
use crate::redis::resolve::{Answer, Applied};
use pow_shield_core::metrics::RedisError;

impl Connection {
    /// While the connection serves: its answer ran out, ask again.
    pub(super) fn refresh_if_expired(&self, st: &mut State) {
        if self.names.refresh_due() {
            self.start_resolve(st, true);
        }
    }

    /// Starts resolving; `background`: the connection keeps serving.
    pub(super) fn start_resolve(&self, st: &mut State, background: bool) {
        let Some(r) = &self.settings.resolve else {
            return;
        };
        match self.names.start(r) {
            Ok(()) if !background => st.phase = Phase::Resolving,
            Ok(()) => {}
            Err(why) => self.fail(st, RedisError::Io, &why),
        }
    }

    /// Applies the resolver's answer (from the reconnect event).
    pub(super) fn on_resolved(&self, st: &mut State, answer: Answer) {
        let Some(r) = &self.settings.resolve else {
            return;
        };
        let waiting = st.phase == Phase::Resolving;
        match self
            .names
            .apply(r, &self.settings.name, self.log.worker(), answer, waiting)
        {
            Applied::Unchanged => {}
            Applied::Failed(why) => {
                st.phase = Phase::Disconnected;
                self.fail(st, RedisError::Io, &why);
            }
            Applied::Connect => {
                st.phase = Phase::Disconnected;
                self.connect_to(st);
            }
            Applied::Moved => {
                if st.phase != Phase::Disconnected {
                    // To the new address now (what waits is decided by
                    // pow_shield_fail).
                    self.disconnect(st);
                    self.connect_to(st);
                }
            }
        }
    }
}

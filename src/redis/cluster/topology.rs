//! The slot map: `CLUSTER SLOTS`, asked of the nodes in turn at start,
//! after a `MOVED` and while a master is unavailable, with back-off while
//! the answer does not change. A new map routes the slots, makes the
//! connections it names, says which nodes are depended on and retires the
//! ones it no longer names.

use nginx_sys::ngx_event_t;

use super::{cluster, Cluster};
use crate::redis::client::{OnReply, Reply};
use crate::redis::exchange::printable;
use pow_shield_core::redis::cluster::parse_slots;
use pow_shield_core::redis::command::encode;
use pow_shield_core::redis::retries::RefreshBackoff;

impl Cluster {
    /// Asks for the map soon, unless a request is already on its way.
    pub(super) fn request_refresh(&self) {
        if self.refreshing.get() || self.closing.get() {
            return;
        }
        // SAFETY: our refresh event.
        unsafe {
            let ev = self.refresh_ev.get();
            if (*ev).timer_set() == 0 {
                nginx_sys::ngx_add_timer(ev, self.refresh_wait.get().ms());
            }
        }
    }

    fn refresh(&self) {
        if self.closing.get() {
            return;
        }
        let mut command = Vec::new();
        encode(&mut command, &[b"CLUSTER", b"SLOTS"]);
        let count = self.nodes.borrow().len();
        for _ in 0..count {
            let i = self.next_asked.get() % count.max(1);
            self.next_asked.set(i + 1);
            let nodes = self.nodes.borrow();
            let Some(node) = nodes.get(i) else {
                continue;
            };
            if !node.client.is_healthy() {
                continue;
            }
            let me = self.me.clone();
            let host = node.addr.host.clone();
            let on_reply = OnReply::Call(Box::new(move |reply: &Reply| {
                if let Some(cluster) = me.upgrade() {
                    cluster.on_map(reply, &host);
                }
            }));
            if node.client.submit_topology(&command, on_reply).is_ok() {
                self.refreshing.set(true);
                return;
            }
        }
        // No node to ask: later.
        self.backoff();
        self.request_refresh();
    }

    fn backoff(&self) {
        let mut wait = self.refresh_wait.get();
        wait.grow();
        self.refresh_wait.set(wait);
    }

    fn on_map(&self, reply: &Reply, seen_from: &str) {
        self.refreshing.set(false);
        let read = match reply {
            Reply::Frame(frame) => {
                Some(parse_slots(&frame.as_owned(), seen_from).map_err(str::to_owned))
            }
            // e.g. a Redis without cluster support: commands still go to
            // the seed, which then answers them itself.
            Reply::Error(text) => Some(Err(format!("CLUSTER SLOTS refused: {}", printable(text)))),
            Reply::Failed => None,
        };
        let ranges = match read {
            Some(Ok(ranges)) => ranges,
            Some(Err(why)) => {
                if !self.map_error.replace(true) {
                    error!(self.log, "pow_shield: redis cluster map unreadable: {why}");
                }
                self.backoff();
                self.request_refresh();
                return;
            }
            None => {
                // The node failed or refused: ask another one later.
                self.backoff();
                self.request_refresh();
                return;
            }
        };
        self.map_error.set(false);
        if let Ok(mut logged) = self.named_logged.try_borrow_mut() {
            logged.retain(|name| ranges.iter().any(|r| r.master == *name));
        }
        if ranges
            .iter()
            .all(|r| r.master.host.parse::<std::net::IpAddr>().is_ok())
        {
            // Nothing announced by name any more: a new episode may log.
            self.named_lines.set(0);
            self.named_full_logged.set(false);
        }
        let indexes: Vec<Option<usize>> =
            ranges.iter().map(|r| self.node_index(&r.master)).collect();
        let usable: Vec<_> = ranges
            .into_iter()
            .zip(&indexes)
            .filter(|(_, i)| i.is_some())
            .map(|(r, _)| r)
            .collect();
        let changed = {
            let mut routes = self.routes.borrow_mut();
            let mut at = indexes.iter().flatten();
            routes.replace(&usable, |_| at.next().copied().unwrap_or(0))
        };
        self.set_serving(&indexes);
        self.retire_absent(&indexes);
        if changed {
            let masters = {
                let mut m: Vec<_> = usable.iter().map(|r| r.master.to_string()).collect();
                m.sort();
                m.dedup();
                m
            };
            notice!(
                self.log,
                "pow_shield: redis cluster map: {} slot ranges on {} masters ({})",
                usable.len(),
                masters.len(),
                masters.join(" ")
            );
            self.refresh_wait.set(RefreshBackoff::default());
        } else {
            // Unchanged (a master down, no failover yet): ask less often.
            self.backoff();
        }
    }
}

pub(super) unsafe extern "C" fn refresh_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: our refresh event carries the cluster.
        let (cluster, exiting) = unsafe {
            (
                cluster((*ev).data),
                nginx_sys::ngx_exiting != 0 || nginx_sys::ngx_terminate != 0,
            )
        };
        if !exiting {
            cluster.refresh();
        }
    })
}

//! One persistent Redis connection per worker and node, driven by nginx's
//! event loop (docs/directives.md, "pow_shield_redis"). This is what
//! requests and the routers see of it; the connection's life is
//! `connection`, what its commands and replies decide is `exchange` (and
//! `pipeline`, `health` in the core crate).
//! - commands of concurrent requests are appended to one buffer and sent by
//!   one posted flush per loop iteration (pipelining);
//! - replies are matched to waiting slots in order;
//! - an error reply (WRONGTYPE, READONLY, OOM...) fails only its own slot:
//!   the connection stays; each kind is logged once per episode;
//! - while Redis is down, or with `MAX_IN_FLIGHT` commands waiting, `submit`
//!   refuses at once (`Unavailable::Down`, `Unavailable::Busy`): requests
//!   never wait on a dead or drowning Redis.

use nginx_sys::ngx_log_t;

use super::connection::Connection;
pub use super::exchange::{
    Awaits, OnFrame, OnReply, Pending, Replies, Reply, Unavailable, MAX_IN_FLIGHT,
};
pub use super::settings::{Settings, Tls};
pub use super::tls::PeerName;
pub use pow_shield_core::cluster::fallback::Reach;
pub use pow_shield_core::redis::pipeline::Resend;

/// The client.
pub struct Client(Box<Connection>);

impl Client {
    /// Creates the client and starts connecting.
    pub fn start(settings: Settings, cycle_log: *mut ngx_log_t) -> Client {
        Client(Connection::start(settings, cycle_log))
    }

    /// Queues one command; `on_reply` runs from the event loop with the
    /// reply, an error reply's text, or `Reply::Failed` on timeout,
    /// disconnect or shutdown.
    /// Refused at once while Redis is down or `MAX_IN_FLIGHT` commands wait.
    pub fn submit(
        &self,
        command: &[u8],
        on_noscript: Option<Resend>,
        on_reply: OnReply,
    ) -> Result<(), Unavailable> {
        self.0
            .submit(None, command, on_noscript, on_reply)
            .map_err(|(why, _)| why)
    }

    /// `submit` of what becomes its callback once queued: refused, it
    /// comes back with why.
    pub fn submit_pending<P: Pending>(
        &self,
        command: &[u8],
        on_noscript: Option<Resend>,
        pending: P,
    ) -> Result<(), (Unavailable, P)> {
        self.0.submit(None, command, on_noscript, pending)
    }

    /// `submit_pending` preceded by `ASKING` (a Redis Cluster `ASK`): both
    /// are queued or neither, so that no lone ASKING applies to the next
    /// command on the connection.
    pub fn submit_asking<P: Pending>(
        &self,
        command: &[u8],
        on_noscript: Option<Resend>,
        pending: P,
    ) -> Result<(), (Unavailable, P)> {
        let mut asking = Vec::new();
        pow_shield_core::redis::command::encode(&mut asking, &[b"ASKING"]);
        self.0.submit(Some(&asking), command, on_noscript, pending)
    }

    /// Queues `CLUSTER SLOTS` (its reply may nest and be larger).
    pub fn submit_topology(&self, command: &[u8], on_reply: OnReply) -> Result<(), Unavailable> {
        self.0.submit_topology(command, on_reply)
    }

    /// While Redis is down: milliseconds until the next reconnect attempt.
    pub fn retry_in_ms(&self) -> Option<u64> {
        self.0.retry_in_ms()
    }

    /// Closes the connection and cancels every event (worker exit).
    pub fn shutdown(&self) {
        self.0.shutdown();
    }

    /// Whether requests depend on this node: always with a single Redis;
    /// in a Redis Cluster, while the map gives it slots (a seed or a
    /// former master that owns none is not what the fallback gauge
    /// reports).
    pub fn set_serving(&self, serving: bool) {
        self.0.set_serving(serving);
    }

    /// Whether the connection is open (or opening) and Redis available: a
    /// subscription's connection that Redis closed is not.
    pub fn is_connected(&self) -> bool {
        self.0.is_connected()
    }

    /// Whether an unpaid refusal counts a strike now (not within a grace
    /// after an outage of this Redis, as its node saw it).
    #[inline]
    pub fn strikes_unpaid(&self) -> bool {
        self.0.strikes_unpaid()
    }

    /// Whether commands may be sent: the connection is up (or being set up
    /// after an idle close, or on probation after an outage).
    pub fn is_healthy(&self) -> bool {
        self.0.is_healthy()
    }

    /// What requests may take of Redis's word now: connected and
    /// available, not known (closed while idle, or on probation after an
    /// outage: a call finds out), or down.
    pub fn reach(&self) -> Reach {
        self.0.reach()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.shutdown();
    }
}

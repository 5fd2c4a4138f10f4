//! Where each command goes: the one Redis, the master the sentinels name
//! (`sentinel`), or in a Redis Cluster the master serving its key's slot
//! (`cluster`).

use std::rc::Rc;

pub use super::client::Resend;
use super::client::{Client, OnReply, Reach, Unavailable};
pub use super::cluster::{Cluster, NodeTemplate, OnFrame, Seed};
pub use super::sentinel::{Sentinel, SentinelTemplate};

pub enum Router {
    Single(Client),
    Cluster(Rc<Cluster>),
    Sentinel(Rc<Sentinel>),
}

impl Router {
    /// Sends `command` (sent again as it says if Redis answers
    /// `NOSCRIPT`), whose keys share `key`'s slot; `on_reply` runs from
    /// the event loop (`slot`: that slot, where the caller knows it
    /// already; `key` is then not read, and may be empty, as it is for
    /// one Redis or Sentinel). Refused at once if the node for that slot
    /// is down.
    pub fn submit(
        &self,
        (key, slot): (&[u8], Option<u16>),
        command: Resend,
        on_reply: OnFrame,
    ) -> Result<(), Unavailable> {
        match self {
            Router::Single(client) => {
                let again = Some(command.clone());
                client.submit(command.bytes(), again, OnReply::Frame(on_reply))
            }
            Router::Cluster(cluster) => cluster.submit((key, slot), command, on_reply),
            Router::Sentinel(sentinel) => sentinel.submit(command, on_reply),
        }
    }

    /// While Redis (some master) is down: milliseconds until it is tried.
    pub fn retry_in_ms(&self) -> Option<u64> {
        match self {
            Router::Single(client) => client.retry_in_ms(),
            Router::Cluster(cluster) => cluster.retry_in_ms(),
            Router::Sentinel(sentinel) => sentinel.retry_in_ms(),
        }
    }

    /// Whether a command may be sent now (to some node).
    pub fn is_healthy(&self) -> bool {
        match self {
            Router::Single(client) => client.is_healthy(),
            Router::Cluster(cluster) => cluster.is_healthy(),
            Router::Sentinel(sentinel) => sentinel.is_healthy(),
        }
    }

    /// What the connection that `key`'s commands take (in `slot`, where
    /// known) knows of Redis now.
    pub fn reach(&self, key: &[u8], slot: Option<u16>) -> Reach {
        match self {
            Router::Single(client) => client.reach(),
            Router::Cluster(cluster) => cluster.reach(key, slot),
            Router::Sentinel(sentinel) => sentinel.reach(),
        }
    }

    /// Whether an unpaid refusal counts a strike now: not within a grace
    /// after an outage (in a Redis Cluster, of the master of the slot of
    /// the key `key` makes: made only there, every unpaid request asks).
    pub fn strikes_unpaid(&self, key: impl FnOnce() -> String) -> bool {
        match self {
            Router::Single(client) => client.strikes_unpaid(),
            Router::Cluster(cluster) => cluster.strikes_unpaid(key),
            Router::Sentinel(sentinel) => sentinel.strikes_unpaid(),
        }
    }

    pub fn shutdown(&self) {
        match self {
            Router::Single(client) => client.shutdown(),
            Router::Cluster(cluster) => cluster.shutdown(),
            Router::Sentinel(sentinel) => sentinel.shutdown(),
        }
    }
}

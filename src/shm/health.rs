//! Redis's health as a node's workers share it, in the zone's header: one
//! word per Redis (`pow_shield_core::redis::health::NodeHealth`), found by
//! the hash of its name. Atomics only: read on every submission, written
//! on a transition, never under the zone's lock.

use core::cell::Cell;
use core::sync::atomic::{AtomicU64, Ordering};

/// Redis servers a node shares the health of (a Redis Cluster's masters
/// beyond are each worker's own).
pub const PEERS: usize = 16;

/// The words, in the zone's header (zero: free, and up).
#[repr(C)]
pub struct Peers([Peer; PEERS]);

/// One Redis's health as the node's workers share it.
#[repr(C)]
pub struct Peer {
    /// The hash of the Redis's name (never 0 once taken).
    name: AtomicU64,
    /// `NodeHealth`'s word.
    pub word: AtomicU64,
    /// When a worker last found it back (nginx's monotonic ms; 0: never).
    pub back_ms: AtomicU64,
}

impl Peers {
    /// The Redis named `name`, taking a free slot for it; none when all
    /// are taken.
    fn peer_of(&'static self, name: &str) -> Option<&'static Peer> {
        let hash = name_hash(name);
        for peer in &self.0 {
            let taken =
                match peer
                    .name
                    .compare_exchange(0, hash, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => true,
                    Err(other) => other == hash,
                };
            if taken {
                return Some(peer);
            }
        }
        None
    }
}

/// FNV-1a of the name, never 0.
fn name_hash(name: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

thread_local! {
    /// The node's words, once the worker attached its zone.
    static NODE: Cell<Option<&'static Peers>> = const { Cell::new(None) };
}

/// The worker shares the health of its Redis servers through `peers`
/// (its zone's, mapped for the life of the process).
pub fn attach(peers: &'static Peers) {
    let _ = NODE.try_with(|n| n.set(Some(peers)));
}

/// The node's word on the Redis named `name` (none without a zone).
pub fn peer_of(name: &str) -> Option<&'static Peer> {
    NODE.try_with(Cell::get).ok().flatten()?.peer_of(name)
}

//! Local mode: leaky buckets and the replay cache in the shared zone.
//!
//! Two clocks: buckets run on nginx's monotonic clock (a wall-clock step
//! must not freeze them), spent records on the token's epoch time.

use super::{NewWaiter, Poll, Store};
use crate::config::MainConf;
use crate::limiter::bucket;
use crate::limiter::{RateLimit, Verdict};
use crate::shm::{Allocator, Entry, SharedZone, Table, TableKey, Zone};

/// Entries a request expires as it passes (as `limit_req` does).
const EXPIRE_PER_REQUEST: usize = 2;
/// Entries given up per attempt when the zone is full.
const EVICT_WHEN_FULL: usize = 3;

/// The store in the shared-memory zone; answers at once.
pub struct ShmStore {
    zone: SharedZone,
}

impl ShmStore {
    pub fn new(mcf: &MainConf) -> Option<Self> {
        SharedZone::from_conf(mcf).map(|zone| Self { zone })
    }
}

impl Store for ShmStore {
    fn check(
        &self,
        key: &[u8],
        limit: RateLimit,
        monotonic_ms: u64,
        _: &mut NewWaiter,
    ) -> Poll<Verdict> {
        // Each distinct limit counts separately, like separate limit_req zones.
        let key = TableKey::new(&[
            &limit.requests.to_le_bytes(),
            &limit.window_ms.to_le_bytes(),
            key,
        ]);
        self.zone.with_locked(|zone, alloc| {
            zone.buckets.expire(alloc, monotonic_ms, EXPIRE_PER_REQUEST);
            let entry: *mut Entry = match zone.buckets.find(&key) {
                Some(entry) => entry,
                None => match insert_evicting(zone, Zone::buckets_mut, &key, alloc) {
                    Some(entry) => entry,
                    None => return Poll::Unavailable,
                },
            };
            // SAFETY: the entry is in the zone, locked for this closure.
            let entry = unsafe { &mut *entry };
            let verdict = bucket::admit(&mut entry.bucket, limit, monotonic_ms);
            entry.expires_at_ms = monotonic_ms.saturating_add(verdict.reset_after_ms);
            Poll::Ready(verdict)
        })
    }

    fn spend(
        &self,
        digest: &[u8; 32],
        expires_at_ms: u64,
        now_ms: u64,
        _: &mut NewWaiter,
    ) -> Poll<bool> {
        let key = TableKey::new(&[digest]);
        self.zone.with_locked(|zone, alloc| {
            zone.spent.expire(alloc, now_ms, EXPIRE_PER_REQUEST);
            let entry: *mut Entry = match zone.spent.find(&key) {
                Some(entry) if entry.expires_at_ms > now_ms => return Poll::Ready(false),
                // An expired leftover is reused: that token can't verify any more.
                Some(entry) => entry,
                None => match insert_evicting(zone, Zone::spent_mut, &key, alloc) {
                    Some(entry) => entry,
                    None => return Poll::Unavailable,
                },
            };
            // SAFETY: the entry is in the zone, locked for this closure.
            unsafe { (*entry).expires_at_ms = expires_at_ms };
            Poll::Ready(true)
        })
    }
}

/// Inserts `key` into the chosen table, giving up the least recently used
/// entries when the zone is full: buckets first (a forgotten bucket only
/// forgives a client), spent tokens last (forgetting one reopens a replay
/// for the rest of its lifetime).
fn insert_evicting(
    zone: &mut Zone,
    table: fn(&mut Zone) -> &mut Table,
    key: &TableKey,
    alloc: &Allocator,
) -> Option<*mut Entry> {
    type Pick = fn(&mut Zone) -> &mut Table;
    let give_up: [Option<Pick>; 3] = [None, Some(Zone::buckets_mut), Some(Zone::spent_mut)];
    for victims in give_up {
        if let Some(victims) = victims {
            victims(zone).evict(alloc, EVICT_WHEN_FULL);
        }
        if let Some(entry) = table(zone).insert(key, alloc) {
            return Some(entry);
        }
    }
    None
}

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
/// Bounds of a refusal's `Retry-After` (room may free up sooner than the
/// oldest spent record expires: buckets drain, other records expire).
const FULL_RETRY_MS: (u64, u64) = (1_000, 60_000);

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
                None => {
                    let epoch_ms = crate::ffi::now_ms();
                    match insert_making_room(zone, Zone::buckets_mut, &key, alloc, epoch_ms) {
                        Some(entry) => entry,
                        None => {
                            zone.buckets_refused = zone.buckets_refused.wrapping_add(1);
                            return full(zone, epoch_ms);
                        }
                    }
                }
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
            if let Some(entry) = zone.spent.get(&key) {
                if entry.expires_at_ms > now_ms {
                    return Poll::Ready(false);
                }
            }
            // An expired leftover is reused: that token can't verify any
            // more. `find` moves it to the head, where fresh records go.
            let entry: *mut Entry = match zone.spent.find(&key) {
                Some(entry) => entry,
                None => match insert_making_room(zone, Zone::spent_mut, &key, alloc, now_ms) {
                    Some(entry) => entry,
                    // Not recorded, so not accepted: else it could be replayed.
                    None => {
                        zone.spent_refused = zone.spent_refused.wrapping_add(1);
                        return full(zone, now_ms);
                    }
                },
            };
            // SAFETY: the entry is in the zone, locked for this closure.
            unsafe { (*entry).expires_at_ms = expires_at_ms };
            Poll::Ready(true)
        })
    }
}

/// Inserts `key` into the chosen table, making room when the zone is full:
/// first expired spent records (they protect nothing any more), then the
/// least recently used buckets (a forgotten bucket only forgives a client).
/// An unexpired spent record is never given up: forgetting it would reopen
/// its token to replay.
fn insert_making_room(
    zone: &mut Zone,
    table: fn(&mut Zone) -> &mut Table,
    key: &TableKey,
    alloc: &Allocator,
    epoch_ms: u64,
) -> Option<*mut Entry> {
    type MakeRoom = fn(&mut Zone, &Allocator, u64);
    let make_room: [Option<MakeRoom>; 3] = [
        None,
        Some(|zone, alloc, epoch_ms| zone.spent.expire(alloc, epoch_ms, EVICT_WHEN_FULL)),
        Some(|zone, alloc, _| {
            zone.buckets.evict(alloc, EVICT_WHEN_FULL);
        }),
    ];
    for step in make_room {
        if let Some(step) = step {
            step(zone, alloc, epoch_ms);
        }
        if let Some(entry) = table(zone).insert(key, alloc) {
            return Some(entry);
        }
    }
    None
}

/// The answer when no room could be made: retry once the oldest spent
/// record has expired.
fn full<T>(zone: &mut Zone, epoch_ms: u64) -> Poll<T> {
    let (least, most) = FULL_RETRY_MS;
    let retry_after_ms = zone
        .spent
        .oldest_expires_at_ms()
        .map_or(least, |at| at.saturating_sub(epoch_ms))
        .clamp(least, most);
    Poll::Full { retry_after_ms }
}

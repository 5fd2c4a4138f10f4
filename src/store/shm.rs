//! Local mode: leaky buckets, circuit breakers and the replay cache in the
//! shared zone.
//!
//! Two clocks: buckets and breakers run on nginx's monotonic clock (a
//! wall-clock step must not freeze them), spent records on the token's
//! epoch time.

use super::{CheckArgs, NewWaiter, Poll, SpendArgs, Store};
use crate::config::MainConf;
use crate::shm::{Allocator, Entry, SharedZone, Table, TableKey, Zone};
use pow_shield_core::decision::Checked;
use pow_shield_core::limiter::bucket;
use pow_shield_core::limiter::strikes::{Block, RedRules, Standing};
use pow_shield_core::limiter::{Spent, Verdict};

/// Entries a request expires as it passes (as `limit_req` does).
const EXPIRE_PER_REQUEST: usize = 2;
/// Entries given up per attempt when the zone is full.
const EVICT_WHEN_FULL: usize = 3;
/// Bounds of a refusal's `Retry-After` (room may free up sooner than the
/// oldest spent record expires: buckets drain, other records expire).
const FULL_RETRY_MS: (u64, u64) = (1_000, 60_000);

/// The store in the shared-memory zone; answers at once.
#[derive(Clone)]
pub struct ShmStore {
    zone: SharedZone,
}

impl ShmStore {
    pub fn new(mcf: &MainConf) -> Option<Self> {
        SharedZone::from_conf(mcf).map(|zone| Self { zone })
    }

    /// The client's block, if the zone knows of one (no writes).
    pub fn blocked(&self, key: &[u8], rules: RedRules, monotonic_ms: u64) -> Option<Standing> {
        let client = TableKey::new(&[key]);
        self.zone.with_locked(|zone, _| {
            let standing = zone
                .strikes
                .find(&client)?
                .strikes()
                .standing(rules, monotonic_ms);
            (standing.block != Block::Clear).then_some(standing)
        })
    }

    /// Remembers a block another store reported, for as long as it lasts.
    /// Nothing is written for a clear standing; no room: not remembered.
    pub fn remember(&self, key: &[u8], standing: Standing, rules: RedRules, monotonic_ms: u64) {
        if standing.block == Block::Clear || standing.block_ms == 0 {
            return;
        }
        let client = TableKey::new(&[key]);
        self.zone.with_locked(|zone, alloc| {
            if let Some(entry) = breaker(zone, alloc, &client) {
                entry.strikes().remember(standing, rules, monotonic_ms);
                entry.expires_at_ms = entry.strikes().forgotten_at_ms();
            }
        })
    }

    /// Records a spend another store (Redis) accepted in the replay cache,
    /// without touching strikes (they live in that store); `Ready(false)`
    /// if the cache held it already.
    pub fn record_spent(&self, digest: &[u8; 32], expires_at_ms: u64, now_ms: u64) -> Poll<bool> {
        let key = TableKey::new(&[digest]);
        self.zone.with_locked(|zone, alloc| {
            record_spent_locked(zone, alloc, &key, expires_at_ms, now_ms)
        })
    }

    /// Whether the replay cache holds `digest` unexpired at `now_ms`
    /// (epoch), without touching its order.
    pub fn is_spent(&self, digest: &[u8; 32], now_ms: u64) -> bool {
        let key = TableKey::new(&[digest]);
        self.zone.with_locked(
            |zone, _| matches!(zone.spent.get(&key), Some(entry) if entry.expires_at_ms > now_ms),
        )
    }
}

impl Store for ShmStore {
    fn check(&self, args: CheckArgs, monotonic_ms: u64, _: &mut NewWaiter) -> Poll<Checked> {
        // Each distinct limit counts separately, like separate limit_req zones.
        let limit = args.limit;
        let bucket_key = TableKey::new(&[
            &limit.requests.to_le_bytes(),
            &limit.window_ms.to_le_bytes(),
            args.key,
        ]);
        let client = TableKey::new(&[args.key]);
        self.zone.with_locked(|zone, alloc| {
            zone.buckets.expire(alloc, monotonic_ms, EXPIRE_PER_REQUEST);
            zone.strikes.expire(alloc, monotonic_ms, EXPIRE_PER_REQUEST);
            // Red first: a blocked client costs one lookup and writes nothing.
            let mut standing = Standing::default();
            if let Some(entry) = zone.strikes.find(&client) {
                standing = entry.strikes().standing(args.rules, monotonic_ms);
                if standing.block != Block::Clear {
                    return Poll::Ready(Checked {
                        verdict: Verdict::default(),
                        standing,
                    });
                }
            }
            let entry: *mut Entry = match zone.buckets.find(&bucket_key) {
                Some(entry) => entry,
                None => {
                    let epoch_ms = crate::ffi::now_ms();
                    match insert_making_room(zone, Zone::buckets_mut, &bucket_key, alloc, epoch_ms)
                    {
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
            let verdict = bucket::admit(entry.bucket(), limit, monotonic_ms);
            entry.expires_at_ms = monotonic_ms.saturating_add(verdict.reset_after_ms);
            if !verdict.allowed && args.offence && args.rules.strikes.is_some() {
                // A strike that finds no room is lost: forgetting one only
                // forgives a client.
                if let Some(struck) = strike_locked(zone, alloc, &client, args.rules, monotonic_ms)
                {
                    standing = struck;
                }
            }
            Poll::Ready(Checked { verdict, standing })
        })
    }

    fn strike(
        &self,
        key: &[u8],
        rules: RedRules,
        monotonic_ms: u64,
        _: &mut NewWaiter,
    ) -> Poll<Standing> {
        let client = TableKey::new(&[key]);
        self.zone.with_locked(|zone, alloc| {
            zone.strikes.expire(alloc, monotonic_ms, EXPIRE_PER_REQUEST);
            match strike_locked(zone, alloc, &client, rules, monotonic_ms) {
                Some(standing) => Poll::Ready(standing),
                None => full(zone, crate::ffi::now_ms()),
            }
        })
    }

    fn spend(
        &self,
        args: SpendArgs,
        now_ms: u64,
        monotonic_ms: u64,
        _: &mut NewWaiter,
    ) -> Poll<Spent> {
        let key = TableKey::new(&[args.digest]);
        let client = TableKey::new(&[args.key]);
        // One lock: the spend and the strike it takes back are one step.
        self.zone.with_locked(|zone, alloc| {
            zone.strikes.expire(alloc, monotonic_ms, EXPIRE_PER_REQUEST);
            if let Some(entry) = zone.strikes.find(&client) {
                let standing = entry.strikes().standing(args.rules, monotonic_ms);
                if standing.block != Block::Clear {
                    return Poll::Ready(Spent::Blocked(standing));
                }
            }
            match record_spent_locked(zone, alloc, &key, args.expires_at_ms, now_ms) {
                Poll::Ready(true) => {}
                Poll::Ready(false) => return Poll::Ready(Spent::Replayed),
                Poll::Full { retry_after_ms } => return Poll::Full { retry_after_ms },
                Poll::Pending | Poll::Down | Poll::Busy => return Poll::Down,
            }
            let mut standing = Standing::default();
            if let Some(entry) = zone.strikes.find(&client) {
                entry.strikes().forgive(args.rules, monotonic_ms);
                standing = entry.strikes().standing(args.rules, monotonic_ms);
            }
            Poll::Ready(Spent::Accepted(standing))
        })
    }
}

/// Marks `key` (a token digest) spent until `expires_at_ms` in the locked
/// zone; `Ready(false)` if it already was.
fn record_spent_locked(
    zone: &mut Zone,
    alloc: &Allocator,
    key: &TableKey,
    expires_at_ms: u64,
    now_ms: u64,
) -> Poll<bool> {
    zone.spent.expire(alloc, now_ms, EXPIRE_PER_REQUEST);
    if let Some(entry) = zone.spent.get(key) {
        if entry.expires_at_ms > now_ms {
            return Poll::Ready(false);
        }
    }
    // An expired leftover is reused: that token can't verify any more.
    // `find` moves it to the head, where fresh records go.
    let entry: *mut Entry = match zone.spent.find(key) {
        Some(entry) => entry,
        None => match insert_making_room(zone, Zone::spent_mut, key, alloc, now_ms) {
            Some(entry) => entry,
            // Not recorded, so not accepted: else it could be replayed.
            None => {
                zone.spent_refused = zone.spent_refused.wrapping_add(1);
                return full(zone, now_ms);
            }
        },
    };
    // SAFETY: the entry is in the zone, locked by the caller.
    unsafe { (*entry).expires_at_ms = expires_at_ms };
    Poll::Ready(true)
}

/// One strike for `client` in the locked zone; `None` if there is no room
/// for a new breaker.
fn strike_locked(
    zone: &mut Zone,
    alloc: &Allocator,
    client: &TableKey,
    rules: RedRules,
    monotonic_ms: u64,
) -> Option<Standing> {
    let entry = breaker(zone, alloc, client)?;
    let standing = entry.strikes().strike(rules, monotonic_ms);
    entry.expires_at_ms = entry.strikes().forgotten_at_ms();
    Some(standing)
}

/// The breaker entry of `client` in the locked zone, made if missing;
/// `None` if there is no room for it.
fn breaker<'z>(zone: &'z mut Zone, alloc: &Allocator, client: &TableKey) -> Option<&'z mut Entry> {
    let entry: *mut Entry = match zone.strikes.find(client) {
        Some(entry) => entry,
        None => {
            let epoch_ms = crate::ffi::now_ms();
            insert_making_room(zone, Zone::strikes_mut, client, alloc, epoch_ms)?
        }
    };
    // SAFETY: the entry is in the zone, locked by the caller for as long as
    // the zone is borrowed.
    Some(unsafe { &mut *entry })
}

/// Inserts `key` into the chosen table, making room when the zone is full:
/// first expired spent records (they protect nothing any more), then the
/// least recently used buckets and breakers (forgetting one only forgives
/// a client).
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
    let make_room: [Option<MakeRoom>; 4] = [
        None,
        Some(|zone, alloc, epoch_ms| zone.spent.expire(alloc, epoch_ms, EVICT_WHEN_FULL)),
        Some(|zone, alloc, _| {
            zone.buckets.evict(alloc, EVICT_WHEN_FULL);
        }),
        Some(|zone, alloc, _| {
            zone.strikes.evict(alloc, EVICT_WHEN_FULL);
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

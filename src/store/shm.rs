//! Local mode: sliding windows, circuit breakers and the replay cache in the
//! shared zone. The order of the steps is the core's
//! (`pow_shield_core::store::run`); this file is the zone's tables under
//! its lock: lookups, insertion that makes room, and expiry.
//!
//! Two clocks: windows and breakers run on nginx's monotonic clock (a
//! wall-clock step must not freeze them), spent records on the token's
//! epoch time.

use crate::config::MainConf;
use crate::shm::{Allocator, Entry, SharedZone, Table, TableKey, Zone};
use pow_shield_core::limiter::breaker::{Block, BreakerRules, BreakerStatus, StrikeCounter};
use pow_shield_core::limiter::window::SlidingWindow;
use pow_shield_core::limiter::{RateLimit, Verdict};
use pow_shield_core::store::refusals::{Refusal, Refused};
use pow_shield_core::store::{self, MakeRoom, NoRoom, Now, Op, Reply, Subject, Tables, MAKE_ROOM};

/// Entries a request expires as it passes (as `limit_req` does).
const EXPIRE_PER_REQUEST: usize = 2;
/// Entries given up per attempt when the zone is full.
const EVICT_WHEN_FULL: usize = 3;

/// The store in the shared-memory zone; answers at once.
#[derive(Clone)]
pub struct ShmStore {
    zone: SharedZone,
}

impl ShmStore {
    pub fn new(mcf: &MainConf) -> Option<Self> {
        SharedZone::from_conf(mcf).map(|zone| Self { zone })
    }

    /// A number that names this node's zone (from its random secret, kept
    /// across reloads with the zone): the local data generation.
    pub fn zone_id(&self) -> u64 {
        let secret = self.zone.random_secret();
        let mut id = [0u8; 8];
        id.copy_from_slice(&secret[24..32]);
        u64::from_le_bytes(id) >> 11
    }

    /// Runs one operation for Redis, standing in for it (the `local`
    /// fallback, a full queue): as `run`, but an unpaid refusal is no
    /// strike (`Op::standing_in`). Every stand-in of cluster mode comes
    /// here.
    pub fn stand_in(&self, op: Op, subject: &Subject, now: Now) -> Reply {
        self.run(op.standing_in(), subject, now)
    }

    /// Runs one operation under the zone's lock.
    pub fn run(&self, op: Op, subject: &Subject, now: Now) -> Reply {
        self.zone.with_locked(|zone, alloc| {
            // As a request passes it expires a few stale entries of the
            // tables it uses.
            match op {
                Op::Check { .. } => {
                    zone.buckets
                        .expire(alloc, now.monotonic_ms, EXPIRE_PER_REQUEST);
                    zone.strikes
                        .expire(alloc, now.monotonic_ms, EXPIRE_PER_REQUEST);
                }
                Op::Spend(_) | Op::Forgive(_) => {
                    zone.strikes
                        .expire(alloc, now.monotonic_ms, EXPIRE_PER_REQUEST);
                    zone.spent.expire(alloc, now.epoch_ms, EXPIRE_PER_REQUEST);
                }
                Op::Strike => zone
                    .strikes
                    .expire(alloc, now.monotonic_ms, EXPIRE_PER_REQUEST),
            }
            store::run(&mut Locked { zone, alloc, now }, op, subject, now)
        })
    }

    /// The client's block Redis reported, if the zone still holds it (no
    /// writes).
    pub fn blocked(
        &self,
        key: &[u8],
        rules: BreakerRules,
        monotonic_ms: u64,
    ) -> Option<BreakerStatus> {
        let client = TableKey::new(&[key]);
        self.zone.with_locked(|zone, _| {
            // Only what Redis reported: a block the fallback counted while
            // Redis was unavailable is Redis's to confirm once it is back.
            let breaker = zone
                .strikes
                .find(&client)?
                .strikes()
                .confirmed(rules, monotonic_ms);
            (breaker.block != Block::Clear).then_some(breaker)
        })
    }

    /// Remembers a block another store reported, for as long as it lasts.
    /// Nothing is written for a clear breaker; no room: not remembered.
    pub fn remember(
        &self,
        key: &[u8],
        breaker: BreakerStatus,
        rules: BreakerRules,
        monotonic_ms: u64,
    ) {
        if breaker.block == Block::Clear || breaker.block_ms == 0 {
            return;
        }
        let client = TableKey::new(&[key]);
        self.zone.with_locked(|zone, alloc| {
            if let Some(entry) = breaker_entry(zone, alloc, &client) {
                entry.strikes().remember(breaker, rules, monotonic_ms);
                entry.expires_at_ms = entry.strikes().forgotten_at_ms();
            }
        })
    }

    /// Records a spend another store (Redis) accepted in the replay cache,
    /// without touching strikes (they live in that store); `Ok(false)` if
    /// the cache held it already.
    pub fn record_spent(
        &self,
        digest: &[u8; 32],
        expires_at_ms: u64,
        now_ms: u64,
    ) -> Result<bool, NoRoom> {
        let key = TableKey::new(&[digest]);
        self.zone.with_locked(|zone, alloc| {
            zone.spent.expire(alloc, now_ms, EXPIRE_PER_REQUEST);
            record_spent(zone, alloc, &key, expires_at_ms, now_ms)
        })
    }

    /// Takes back one unpaid strike of `key` (a spend another store took).
    pub fn forgive(&self, key: &[u8], rules: BreakerRules, monotonic_ms: u64) {
        let client = TableKey::new(&[key]);
        self.zone.with_locked(|zone, _| {
            if let Some(entry) = zone.strikes.find(&client) {
                entry.strikes().forgive(rules, monotonic_ms);
            }
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

/// Cluster mode's refusals (`pow_shield_core::store::refusals`), by the
/// key `refusals::refusal_key` makes: Redis refused the client until `T`.
impl ShmStore {
    /// Refuses one more unpaid request of a client Redis refused, if `T`
    /// is still ahead at `now_ms` (monotonic, read fresh) and Redis's word
    /// is fresh (or `stale_ok`).
    pub fn refuse_locally(
        &self,
        refusal: &[u8],
        rules: BreakerRules,
        now_ms: u64,
        stale_ok: bool,
        redis_up: bool,
        rising: bool,
    ) -> Option<Refused> {
        let key = TableKey::new(&[refusal]);
        self.zone.with_locked(|zone, alloc| {
            zone.refusals.expire(alloc, now_ms, EXPIRE_PER_REQUEST);
            let entry = zone.refusals.get(&key)?;
            let refused = entry
                .refusal()
                .refuse(rules, now_ms, (stale_ok, redis_up), rising)?;
            // Kept past `T` until a worker took the refusal.
            if !entry.refusal().disposable() {
                entry.expires_at_ms = entry.expires_at_ms.max(now_ms + KEEP_PENDING_MS);
            }
            Some(refused)
        })
    }

    /// Takes the client's refusals no worker took yet, for this worker's
    /// batch.
    pub fn take_pending(&self, refusal: &[u8]) -> u32 {
        let key = TableKey::new(&[refusal]);
        self.zone.with_locked(|zone, _| {
            zone.refusals
                .get(&key)
                .map_or(0, |entry| entry.refusal().take_pending())
        })
    }

    /// Keeps Redis's refusal of a check sent at `asked_ms` until its `T`.
    /// No room (after giving up older refusals and expired spent records):
    /// not kept, the next request asks Redis.
    pub fn learn_refusal(
        &self,
        refusal: &[u8],
        verdict: &Verdict,
        breaker: &BreakerStatus,
        asked_ms: u64,
    ) {
        let key = TableKey::new(&[refusal]);
        let epoch_ms = self.now_epoch_ms();
        self.zone.with_locked(|zone, alloc| {
            let entry: *mut Entry = match zone.refusals.find(&key) {
                Some(entry) => entry,
                None => {
                    let made = zone.refusals.insert(&key, alloc).map(|e| e as *mut Entry);
                    match made.or_else(|| {
                        evict_refusals(&mut zone.refusals, alloc);
                        zone.spent.expire(alloc, epoch_ms, EVICT_WHEN_FULL);
                        zone.refusals.insert(&key, alloc).map(|e| e as *mut Entry)
                    }) {
                        Some(entry) => entry,
                        None => return,
                    }
                }
            };
            // SAFETY: the entry is in the zone, locked for this closure.
            let entry = unsafe { &mut *entry };
            let keep = match entry.refusal().disposable() {
                true => 0,
                false => asked_ms + KEEP_PENDING_MS,
            };
            match entry.refusal().learn(verdict, breaker, asked_ms) {
                Some(t) => entry.expires_at_ms = t.max(keep),
                // Not one the entry can hold: Redis decides the next one.
                None => {
                    entry.refusal().release(asked_ms);
                    entry.expires_at_ms = asked_ms.max(keep);
                }
            }
        })
    }

    /// Redis took `sent` of the client's refusals counted here.
    pub fn refusals_sent(&self, refusal: &[u8], sent: u32, over: u32, strikes: u32) {
        let now_ms = crate::ffi::monotonic_ms();
        self.with_refusal(refusal, |r| r.acknowledged(sent, over, strikes, now_ms));
    }

    /// Forgets a client's refusal (it is blocked now: once the block ends,
    /// Redis decides again, with the strikes it forgot).
    /// What no worker took yet stays until one does.
    pub fn forget_refusal(&self, refusal: &[u8]) {
        let key = TableKey::new(&[refusal]);
        self.zone.with_locked(|zone, alloc| {
            let Some(entry) = zone.refusals.get(&key) else {
                return;
            };
            if entry.refusal().disposable() {
                zone.refusals.remove_key(&key, alloc);
            } else {
                entry.refusal().release(crate::ffi::monotonic_ms());
            }
        })
    }

    /// A spend took back one of the client's strikes: Redis counts `strikes`.
    pub fn refusal_forgiven(&self, refusal: &[u8], strikes: u32) {
        self.with_refusal(refusal, |r| r.forgiven(strikes));
    }

    /// Forgets every refusal learnt from Redis (it may have lost them).
    pub fn forget_refusals(&self) {
        let now_ms = crate::ffi::monotonic_ms();
        self.zone.with_locked(|zone, alloc| {
            zone.refusals.retain(alloc, |entry| {
                let refusal = entry.refusal();
                refusal.release(now_ms);
                !refusal.disposable()
            })
        })
    }

    fn with_refusal(&self, refusal: &[u8], f: impl FnOnce(&mut Refusal)) {
        let key = TableKey::new(&[refusal]);
        self.zone.with_locked(|zone, _| {
            if let Some(entry) = zone.refusals.get(&key) {
                f(entry.refusal());
            }
        })
    }

    fn now_epoch_ms(&self) -> u64 {
        crate::ffi::now_ms()
    }
}

/// How long past `T` a refusal no worker took yet stays (they take it
/// within `refusals::BATCH_MS`; this is a bound, not a wait).
const KEEP_PENDING_MS: u64 = 10_000;

/// Gives up the oldest local refusals for room, but none a worker has yet
/// to take (their strikes would be lost).
fn evict_refusals(refusals: &mut Table, alloc: &Allocator) {
    refusals.evict_unless(alloc, EVICT_WHEN_FULL, |entry| {
        !entry.refusal().disposable()
    });
}

/// The zone's tables while its lock is held.
struct Locked<'z> {
    zone: &'z mut Zone,
    alloc: &'z Allocator,
    now: Now,
}

impl Tables for Locked<'_> {
    fn bucket<R>(
        &mut self,
        key: &[u8],
        limit: RateLimit,
        f: impl FnOnce(&mut SlidingWindow) -> (R, u64),
    ) -> Result<R, NoRoom> {
        // Each distinct limit counts separately, like separate limit_req zones.
        let bucket_key = TableKey::new(&[
            &limit.requests.to_le_bytes(),
            &limit.window_ms.to_le_bytes(),
            key,
        ]);
        let entry: *mut Entry = match self.zone.buckets.find(&bucket_key) {
            Some(entry) => entry,
            None => {
                let epoch_ms = self.now.epoch_ms;
                match insert_making_room(
                    self.zone,
                    Zone::buckets_mut,
                    &bucket_key,
                    self.alloc,
                    epoch_ms,
                ) {
                    Some(entry) => entry,
                    None => {
                        self.zone.buckets_refused = self.zone.buckets_refused.wrapping_add(1);
                        return Err(full(self.zone, epoch_ms));
                    }
                }
            }
        };
        // SAFETY: the entry is in the zone, locked for as long as `self`.
        let entry = unsafe { &mut *entry };
        let (result, keep_until_ms) = f(entry.window());
        entry.expires_at_ms = keep_until_ms;
        Ok(result)
    }

    fn breaker<R>(
        &mut self,
        key: &[u8],
        create: bool,
        f: impl FnOnce(&mut StrikeCounter) -> R,
    ) -> Result<Option<R>, NoRoom> {
        let client = TableKey::new(&[key]);
        let entry = if create {
            match breaker_entry(self.zone, self.alloc, &client) {
                Some(entry) => entry,
                None => return Err(full(self.zone, self.now.epoch_ms)),
            }
        } else {
            match self.zone.strikes.find(&client) {
                Some(entry) => entry,
                None => return Ok(None),
            }
        };
        let result = f(entry.strikes());
        entry.expires_at_ms = entry.strikes().forgotten_at_ms();
        Ok(Some(result))
    }

    fn spend(&mut self, digest: &[u8; 32], until_ms: u64, now_ms: u64) -> Result<bool, NoRoom> {
        let key = TableKey::new(&[digest]);
        record_spent(self.zone, self.alloc, &key, until_ms, now_ms)
    }
}

/// Marks `key` (a token digest) spent until `expires_at_ms` in the locked
/// zone; `Ok(false)` if it already was.
fn record_spent(
    zone: &mut Zone,
    alloc: &Allocator,
    key: &TableKey,
    expires_at_ms: u64,
    now_ms: u64,
) -> Result<bool, NoRoom> {
    if let Some(entry) = zone.spent.get(key) {
        if entry.expires_at_ms > now_ms {
            return Ok(false);
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
                return Err(full(zone, now_ms));
            }
        },
    };
    // SAFETY: the entry is in the zone, locked by the caller.
    unsafe { (*entry).expires_at_ms = expires_at_ms };
    Ok(true)
}

/// The breaker entry of `client` in the locked zone, made if missing;
/// `None` if there is no room for it.
fn breaker_entry<'z>(
    zone: &'z mut Zone,
    alloc: &Allocator,
    client: &TableKey,
) -> Option<&'z mut Entry> {
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

/// Inserts `key` into the chosen table, making room when the zone is full
/// in the core's order (`MAKE_ROOM`): never an unexpired spent record.
fn insert_making_room(
    zone: &mut Zone,
    table: fn(&mut Zone) -> &mut Table,
    key: &TableKey,
    alloc: &Allocator,
    epoch_ms: u64,
) -> Option<*mut Entry> {
    for step in MAKE_ROOM {
        match step {
            MakeRoom::Nothing => {}
            MakeRoom::OldestRefusals => {
                evict_refusals(&mut zone.refusals, alloc);
            }
            MakeRoom::ExpiredSpent => zone.spent.expire(alloc, epoch_ms, EVICT_WHEN_FULL),
            MakeRoom::OldestBuckets => {
                zone.buckets.evict(alloc, EVICT_WHEN_FULL);
            }
            MakeRoom::OldestBreakers => {
                zone.strikes.evict(alloc, EVICT_WHEN_FULL);
            }
        }
        if let Some(entry) = table(zone).insert(key, alloc) {
            return Some(entry);
        }
    }
    None
}

/// The answer when no room could be made: retry once the oldest spent
/// record has expired.
fn full(zone: &mut Zone, epoch_ms: u64) -> NoRoom {
    NoRoom {
        retry_after_ms: store::full_retry_after_ms(zone.spent.oldest_expires_at_ms(), epoch_ms),
    }
}

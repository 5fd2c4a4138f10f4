//! What cluster mode keeps in the zone beside Redis (docs/operations.md,
//! "What is decided where"), shared by the node's workers and kept across
//! reloads: the blocks Redis reported (blocking stays cheap), the spends
//! Redis accepted (a token spent through Redis stays refused here during a
//! later outage), and the refusals Redis sent (refused here until `T`,
//! `pow_shield_core::cluster::refusals`).

use crate::config::MainConf;
use crate::shm::{Entry, SharedZone, TableKey};
use crate::store::zone::{
    breaker_entry, evict_refusals, record_spent, EVICT_WHEN_FULL, EXPIRE_PER_REQUEST,
};
use pow_shield_core::cluster::refusals::{LocalRefusal, Refused};
use pow_shield_core::limiter::breaker::{Block, BreakerRules, BreakerStatus};
use pow_shield_core::limiter::Verdict;
use pow_shield_core::store::NoRoom;

/// The node's cache in the zone, for its Redis store.
#[derive(Clone)]
pub struct NodeCache {
    zone: SharedZone,
}

impl NodeCache {
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
        // (the mirror of what Redis spent is bounded by the zone's share
        // only: Redis decided the spend)
        let room = self.zone.spent_room(0);
        self.zone.with_locked(|zone, alloc| {
            zone.spent.expire(alloc, now_ms, EXPIRE_PER_REQUEST);
            record_spent(zone, alloc, &key, expires_at_ms, now_ms, room)
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

/// Cluster mode's refusals (`pow_shield_core::cluster::refusals`), by the
/// key `refusals::refusal_key` makes: Redis refused the client until `T`.
impl NodeCache {
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

    /// Whether the zone holds a refusal of `refusal` until a `T` still
    /// ahead of `now_ms`.
    pub fn holds(&self, refusal: &[u8], now_ms: u64) -> bool {
        let key = TableKey::new(&[refusal]);
        self.zone.with_locked(|zone, _| {
            zone.refusals
                .find(&key)
                .is_some_and(|entry| entry.refusal().holds(now_ms))
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
    pub fn refusals_sent(
        &self,
        refusal: &[u8],
        (sent, over, strikes): (u32, u32, u32),
        now_ms: u64,
    ) {
        self.with_refusal(refusal, |r| r.acknowledged(sent, over, strikes, now_ms));
    }

    /// Forgets a client's refusal (it is blocked now: once the block ends,
    /// Redis decides again, with the strikes it forgot).
    /// What no worker took yet stays until one does.
    pub fn forget_refusal(&self, refusal: &[u8], now_ms: u64) {
        let key = TableKey::new(&[refusal]);
        self.zone.with_locked(|zone, alloc| {
            let Some(entry) = zone.refusals.get(&key) else {
                return;
            };
            if entry.refusal().disposable() {
                zone.refusals.remove_key(&key, alloc);
            } else {
                entry.refusal().release(now_ms);
            }
        })
    }

    /// A spend took back one of the client's strikes: Redis counts `strikes`.
    pub fn refusal_forgiven(&self, refusal: &[u8], strikes: u32) {
        self.with_refusal(refusal, |r| r.forgiven(strikes));
    }

    /// Forgets every refusal learnt from Redis (it may have lost them).
    pub fn forget_refusals(&self, now_ms: u64) {
        self.zone.with_locked(|zone, alloc| {
            zone.refusals.retain(alloc, |entry| {
                let refusal = entry.refusal();
                refusal.release(now_ms);
                !refusal.disposable()
            })
        })
    }

    fn with_refusal(&self, refusal: &[u8], f: impl FnOnce(&mut LocalRefusal)) {
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

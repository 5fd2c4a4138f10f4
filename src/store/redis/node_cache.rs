//! What cluster mode keeps in the zone beside Redis (docs/operations.md,
//! "What is decided where"), shared by the node's workers and kept across
//! reloads: the blocks Redis reported (blocking stays cheap), the spends
//! Redis accepted (a token spent through Redis stays refused here during a
//! later outage), and the refusals Redis sent (refused here until `T`,
//! `pow_shield_core::cluster::refusals`). The node reaches them, and the
//! router's word on Redis, through `Around` (`pow_shield_core::cluster::node`).

use crate::config::MainConf;
use crate::redis::router::Router;
use crate::shm::{Allocator, Entry, SharedZone, TableKey, Zone};
use crate::store::zone::{
    breaker_entry, evict_refusals, record_spent, EVICT_WHEN_FULL, EXPIRE_PER_REQUEST,
};
use pow_shield_core::cluster::fallback::Reach;
use pow_shield_core::cluster::node::{Around, BlockOf, Held, Look, Looked, RefusalKeys};
use pow_shield_core::cluster::refusals::{LocalRefusal, Refused};
use pow_shield_core::limiter::breaker::{Block, BreakerRules, BreakerStatus};
use pow_shield_core::limiter::{Verdict, MAX_LIMITS};
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
    /// writes). Only what Redis reported: a block the fallback counted
    /// while Redis was unavailable is Redis's to confirm once it is back.
    pub fn blocked(&self, key: &[u8], rules: BreakerRules, now_ms: u64) -> Option<BreakerStatus> {
        let client = TableKey::new(&[key]);
        self.zone
            .with_locked(|zone, _| block_of(zone, &client, rules, now_ms))
    }

    fn with_refusal<R>(&self, key: &TableKey, f: impl FnOnce(&mut LocalRefusal) -> R) -> Option<R> {
        self.zone
            .with_locked(|zone, _| zone.refusals.get(key).map(|entry| f(entry.refusal())))
    }
}

/// The node's surroundings while it decides: the router's word on Redis,
/// and the zone (none if nginx could not map it: nothing is kept).
pub(super) struct Env<'a> {
    pub router: &'a Router,
    pub cache: Option<&'a NodeCache>,
    pub keys: &'a mut RefusalKeys,
}

impl Around for Env<'_> {
    fn reach(&self, route: &[u8], slot: Option<u16>) -> Reach {
        self.router.reach(route, slot)
    }

    fn healthy(&self) -> bool {
        self.router.is_healthy()
    }

    fn has_zone(&self) -> bool {
        self.cache.is_some()
    }

    fn blocked(&mut self, key: &[u8], rules: BreakerRules, now_ms: u64) -> Option<BreakerStatus> {
        self.cache?.blocked(key, rules, now_ms)
    }

    /// Nothing is written for a clear breaker; no room: not remembered.
    fn remember(&mut self, key: &[u8], breaker: BreakerStatus, rules: BreakerRules, now_ms: u64) {
        let Some(cache) = self.cache.filter(|_| breaker.block != Block::Clear) else {
            return;
        };
        if breaker.block_ms == 0 {
            return;
        }
        let client = TableKey::new(&[key]);
        cache.zone.with_locked(|zone, alloc| {
            if let Some(entry) = breaker_entry(zone, alloc, &client) {
                entry.strikes().remember(breaker, rules, now_ms);
                entry.expires_at_ms = entry.strikes().forgotten_at_ms();
            }
        })
    }

    fn refuse(
        &mut self,
        refusal: &[u8],
        rules: BreakerRules,
        now_ms: u64,
        stale_ok: bool,
        rising: bool,
    ) -> Option<Refused> {
        let cache = self.cache?;
        let key = self.keys.of(refusal);
        let look = Look {
            refusal,
            rules: &rules,
            stale_ok,
            held: Held::NEVER,
        };
        let mut redis_up = None;
        loop {
            let found = cache.zone.with_locked(|zone, alloc| {
                look_up(zone, alloc, (&key, &look), (now_ms, rising), redis_up)
            });
            return match found {
                Found::Refused(refused) => Some(refused),
                Found::Held | Found::Kept | Found::Nothing => None,
                // Asked outside the lock (it may follow another worker's
                // finding: close, connect, log), then looked again.
                Found::AskHealth => {
                    redis_up = Some(self.router.is_healthy());
                    continue;
                }
            };
        }
    }

    fn holds(&mut self, refusal: &[u8], now_ms: u64) -> bool {
        let Some(cache) = self.cache else {
            return false;
        };
        let key = self.keys.of(refusal);
        cache.with_refusal(&key, |r| r.holds(now_ms)) == Some(true)
    }

    fn take_pending(&mut self, refusal: &[u8]) -> u32 {
        let Some(cache) = self.cache else {
            return 0;
        };
        let key = self.keys.of(refusal);
        cache.with_refusal(&key, |r| r.take_pending()).unwrap_or(0)
    }

    /// One lock for the whole look (the client's block too), and one key
    /// for each limit.
    fn look(
        &mut self,
        looks: &[Look],
        (now_ms, rising): (u64, bool),
        (refuse, block): (bool, BlockOf),
        pending: &mut [u32],
    ) -> Option<(usize, Looked)> {
        pending.fill(0);
        let cache = self.cache?;
        let block = block.map(|(key, rules)| (TableKey::new(&[key]), rules));
        // Redis's health, asked only of a refusal kept (a green request's
        // look needs none), and outside the lock: the first look that
        // needs it ends there, having changed nothing but expiry, and the
        // look starts again with it.
        let mut redis_up = None;
        loop {
            let at = (now_ms, rising, redis_up);
            let looked = self.look_once(cache, looks, at, (refuse, block.as_ref()), pending);
            match looked {
                Err(AskHealth) => redis_up = Some(self.router.is_healthy()),
                Ok(answered) => return answered,
            }
        }
    }

    /// No room (after giving up older refusals and expired spent records):
    /// not kept, the next request asks Redis.
    fn learn_refusal(
        &mut self,
        refusal: &[u8],
        verdict: &Verdict,
        breaker: &BreakerStatus,
        asked_ms: u64,
    ) {
        let Some(cache) = self.cache else {
            return;
        };
        let key = self.keys.of(refusal);
        let epoch_ms = crate::ffi::now_ms();
        cache.zone.with_locked(|zone, alloc| {
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

    fn refusals_sent(&mut self, refusal: &[u8], (sent, over, strikes): (u32, u32, u32), now: u64) {
        if let Some(cache) = self.cache {
            let key = self.keys.of(refusal);
            cache.with_refusal(&key, |r| r.acknowledged(sent, over, strikes, now));
        }
    }

    /// What no worker took yet stays until one does.
    fn forget_refusal(&mut self, refusal: &[u8], now_ms: u64) {
        let Some(cache) = self.cache else {
            return;
        };
        let key = self.keys.of(refusal);
        cache.zone.with_locked(|zone, alloc| {
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

    fn refusal_forgiven(&mut self, refusal: &[u8], strikes: u32) {
        if let Some(cache) = self.cache {
            let key = self.keys.of(refusal);
            cache.with_refusal(&key, |r| r.forgiven(strikes));
        }
    }

    fn forget_refusals(&mut self, now_ms: u64) {
        let Some(cache) = self.cache else {
            return;
        };
        cache.zone.with_locked(|zone, alloc| {
            zone.refusals.retain(alloc, |entry| {
                let refusal = entry.refusal();
                refusal.release(now_ms);
                !refusal.disposable()
            })
        })
    }

    /// Without touching strikes (they live in Redis); bounded by the zone's
    /// share only: Redis decided the spend.
    fn record_spent(&mut self, digest: &[u8; 32], until: u64, now: u64) -> Result<bool, NoRoom> {
        let Some(cache) = self.cache else {
            return Ok(true);
        };
        let key = TableKey::new(&[digest]);
        let room = cache.zone.spent_room(0);
        cache.zone.with_locked(|zone, alloc| {
            zone.spent.expire(alloc, now, EXPIRE_PER_REQUEST);
            record_spent(zone, alloc, &key, until, now, room)
        })
    }

    /// Without touching its order.
    fn is_spent(&mut self, digest: &[u8; 32], now_ms: u64) -> bool {
        let Some(cache) = self.cache else {
            return false;
        };
        let key = TableKey::new(&[digest]);
        cache.zone.with_locked(
            |zone, _| matches!(zone.spent.get(&key), Some(entry) if entry.expires_at_ms > now_ms),
        )
    }

    fn forgive(&mut self, key: &[u8], rules: BreakerRules, now_ms: u64) {
        let Some(cache) = self.cache else {
            return;
        };
        let client = TableKey::new(&[key]);
        cache.zone.with_locked(|zone, _| {
            if let Some(entry) = zone.strikes.find(&client) {
                entry.strikes().forgive(rules, now_ms);
            }
        })
    }
}

/// The block of `client` Redis reported, while it holds (the zone locked).
fn block_of(
    zone: &mut Zone,
    client: &TableKey,
    rules: BreakerRules,
    now_ms: u64,
) -> Option<BreakerStatus> {
    let breaker = zone
        .strikes
        .find(client)?
        .strikes()
        .confirmed(rules, now_ms);
    (breaker.block != Block::Clear).then_some(breaker)
}

/// What [`look_up`] found of a refusal.
enum Found {
    /// No refusal of its key.
    Nothing,
    /// A refusal that neither refuses here nor leaves the request to Redis.
    Kept,
    /// Refused here.
    Refused(Refused),
    /// A refusal held leaves the request to Redis.
    Held,
    /// A refusal kept, which needs Redis's health to answer: asked
    /// outside the lock (`AskHealth`).
    AskHealth,
}

/// A look stopped to ask Redis's health outside the zone's lock.
struct AskHealth;

/// `look` at `key`'s refusal in the zone (locked): held before it is
/// refused here, refused, held after. A refusal refused here is kept
/// past `T` until a worker took it.
fn look_up(
    zone: &mut Zone,
    alloc: &Allocator,
    (key, look): (&TableKey, &Look),
    (now_ms, rising): (u64, bool),
    redis_up: Option<bool>,
) -> Found {
    let holds = |entry: &mut Entry| entry.refusal().holds(now_ms);
    if look.held.before && zone.refusals.get(key).is_some_and(holds) {
        return Found::Held;
    }
    // (Every refusal lives in the LRU queue: `Table::touch`.)
    zone.refusals.expire_lru(alloc, now_ms, EXPIRE_PER_REQUEST);
    let Some(entry) = zone.refusals.get(key) else {
        return Found::Nothing;
    };
    // (Redis's health asked only of a refusal kept: a green request's
    // look needs none. Not known yet: asked outside the lock, nothing
    // changed but expiry.)
    let Some(redis_up) = redis_up else {
        return Found::AskHealth;
    };
    let stale_ok_redis_up = (look.stale_ok, redis_up);
    let refusal = entry.refusal();
    match refusal.refuse(*look.rules, now_ms, stale_ok_redis_up, rising) {
        Some(refused) => {
            if !refusal.disposable() {
                entry.expires_at_ms = entry.expires_at_ms.max(now_ms + KEEP_PENDING_MS);
            }
            Found::Refused(refused)
        }
        None if look.held.after && holds(entry) => Found::Held,
        None => Found::Kept,
    }
}

/// How long past `T` a refusal no worker took yet stays (they take it
/// within `refusals::BATCH_MS`; this is a bound, not a wait).
const KEEP_PENDING_MS: u64 = 10_000;

impl Env<'_> {
    /// One look under one lock (`look`); `Err(AskHealth)`: a refusal kept
    /// needs Redis's health, which `redis_up` does not say yet.
    fn look_once(
        &mut self,
        cache: &NodeCache,
        looks: &[Look],
        (now_ms, rising, redis_up): (u64, bool, Option<bool>),
        (refuse, block): (bool, Option<&(TableKey, BreakerRules)>),
        pending: &mut [u32],
    ) -> Result<Option<(usize, Looked)>, AskHealth> {
        let keys = &mut *self.keys;
        // The keys made to refuse, for the pending ones (none where no
        // entry was found: none is made under the lock).
        let mut made: [Option<TableKey>; MAX_LIMITS] = Default::default();
        cache.zone.with_locked(|zone, alloc| {
            if let Some((client, rules)) = block {
                if let Some(breaker) = block_of(zone, client, *rules, now_ms) {
                    return Ok(Some((0, Looked::Blocked(breaker))));
                }
            }
            let mut answered = None;
            let mut looked = 0;
            for ((look, made), at) in looks.iter().zip(&mut made).zip(0..).filter(|_| refuse) {
                let key = keys.of(look.refusal);
                looked = at + 1;
                match look_up(zone, alloc, (&key, look), (now_ms, rising), redis_up) {
                    Found::AskHealth => return Err(AskHealth),
                    Found::Refused(refused) => return Ok(Some((at, Looked::Refused(refused)))),
                    Found::Held => {
                        *made = Some(key);
                        answered = Some((at, Looked::Held));
                        break;
                    }
                    Found::Kept => *made = Some(key),
                    Found::Nothing => {}
                }
            }
            let each = looks.iter().zip(&mut made).zip(pending);
            for (at, ((look, made), n)) in each.enumerate() {
                let key = match made.take() {
                    Some(key) => key,
                    // (None found to refuse: none since, nothing is made
                    // under the lock.)
                    None if at < looked => continue,
                    None => keys.of(look.refusal),
                };
                *n = zone
                    .refusals
                    .get(&key)
                    .map_or(0, |entry| entry.refusal().take_pending());
            }
            Ok(answered)
        })
    }
}

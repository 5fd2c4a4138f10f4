//! The zone as a store: local mode's sliding windows, circuit breakers and
//! replay cache, and the stand-in for Redis the fallback rule chooses. The
//! order of the steps is the core's (`pow_shield_core::store::run`); this
//! file is the zone's tables under its lock: lookups, insertion that makes
//! room, and expiry. (What cluster mode keeps in the zone beside Redis is
//! `redis/node_cache.rs`.)
//!
//! Two clocks: windows and breakers run on nginx's monotonic clock (a
//! wall-clock step must not freeze them), spent records on the token's
//! epoch time.

use crate::config::MainConf;
use crate::shm::{Allocator, Entry, SharedZone, Table, TableKey, Zone};
use pow_shield_core::decision::straight::Straight;
use pow_shield_core::limiter::breaker::{Block, BreakerRules, StrikeCounter};
use pow_shield_core::limiter::client::DEFAULT_KEY_MARK;
use pow_shield_core::limiter::window::SlidingWindow;
use pow_shield_core::limiter::{RateLimit, Verdict};
use pow_shield_core::store::breaker_generation;
use pow_shield_core::store::spent::lifetime_class;
use pow_shield_core::store::{
    self, Counted, MakeRoom, NoRoom, Now, Op, Recorded, Reply, SpentRoom, Subject, Tables,
    MAKE_ROOM,
};

/// Before a `key=` value in its bucket's key (no client key starts so).
pub(super) use pow_shield_core::limiter::client::OWN_KEY;
/// Before a key in the bucket that counts its spent records: as
/// `OWN_KEY`, the default key's NUL byte and a letter no address starts
/// with, so no client key starts so.
const SPENDS_KEY: &[u8] = b"\0spends=";

/// Entries a request expires as it passes (as `limit_req` does).
pub(super) const EXPIRE_PER_REQUEST: usize = 2;
/// Entries given up per attempt when the zone is full.
pub(super) const EVICT_WHEN_FULL: usize = 3;

/// The store in the shared-memory zone; answers at once.
#[derive(Clone)]
pub struct ZoneStore {
    zone: SharedZone,
    /// The longest a spent challenge's record lives (its share's window).
    token_lifetime_ms: u64,
}

impl ZoneStore {
    pub fn new(mcf: &MainConf) -> Option<Self> {
        let token_lifetime_ms = mcf
            .longest_challenge_ttl_ms
            .saturating_add(pow_shield_protocol::FUTURE_SKEW_MS);
        SharedZone::from_conf(mcf).map(|zone| Self {
            zone,
            token_lifetime_ms,
        })
    }

    /// Runs one operation for Redis, standing in for it (the `local`
    /// fallback, a full queue): as `run`, but an unpaid refusal is no
    /// strike (`Op::standing_in`). Every stand-in of cluster mode comes
    /// here.
    pub fn stand_in(&self, op: Op, subject: &Subject, now: Now) -> Reply {
        self.run(op.standing_in(), subject, now)
    }

    /// Whether `key`'s breaker is open in the zone now (a lookup under the
    /// lock; nothing is written).
    pub fn blocked(&self, key: &[u8], rules: BreakerRules, monotonic_ms: u64) -> bool {
        let client = TableKey::new(&[key]);
        self.zone.with_locked(|zone, _| {
            zone.strikes.find(&client).is_some_and(|entry| {
                entry.strikes().status(rules, monotonic_ms).block != Block::Clear
            })
        })
    }

    /// Runs one operation under the zone's lock. (Inline: local mode's
    /// every request asks it, and its answer is large.)
    #[inline(always)]
    pub fn run(&self, op: Op, subject: &Subject, now: Now) -> Reply {
        // (Worked out only by what spends: a check never asks.)
        let room = Room::Of(&self.zone, self.token_lifetime_ms);
        self.zone.with_locked(|zone, alloc| {
            // As a request passes it expires a few stale entries of the
            // tables it uses.
            // (Buckets and breakers live in one queue each.)
            match op {
                Op::Check { .. } => expire_for_check(zone, alloc, now),
                Op::Spend(_) => {
                    zone.strikes
                        .expire_lru(alloc, now.monotonic_ms, EXPIRE_PER_REQUEST);
                    zone.spent.expire(alloc, now.epoch_ms, EXPIRE_PER_REQUEST);
                }
                Op::Strike => zone
                    .strikes
                    .expire_lru(alloc, now.monotonic_ms, EXPIRE_PER_REQUEST),
            }
            store::run(
                &mut Locked {
                    zone,
                    alloc,
                    now,
                    room,
                },
                op,
                subject,
                now,
            )
        })
    }
}

/// A client key as the straight path counts it.
#[derive(Clone, Copy)]
pub enum StraightKey<'k> {
    /// The default key of an IPv4 peer: `DEFAULT_KEY_MARK`, then this
    /// address text (read where nginx keeps it, not copied into one key).
    Address(&'k [u8]),
    /// A key made whole (not empty).
    Made(&'k [u8]),
}

/// Local mode's straight path (`pow_shield_core::decision::straight`)
/// under the zone's lock: as [`ZoneStore::run`] checks an unpaid request,
/// the same entries expired, for a client with no breaker in the zone,
/// its window of `straight`'s limit found or made and counted when the
/// straight path admits it. `key`: the client key (not empty).
/// `Ok(None)`: nothing counted (a breaker, or a request the full path
/// decides); `Err`: no room for the window even after room was made (the
/// check's answer is `Reply::Full`, which the full path takes as it is
/// rather than make room again).
#[inline(always)]
pub fn straight_admit(
    zone: &SharedZone,
    straight: Straight,
    key: StraightKey,
    now: Now,
) -> Result<Option<Verdict>, NoRoom> {
    // (Inline: the window is counted where the handler reads its verdict.)
    zone.with_locked(
        #[inline(always)]
        |zone, alloc| {
            expire_for_check(zone, alloc, now);
            let limit = straight.limit;
            // The bucket `Tables::bucket` counts a client key's request in.
            // (No part before a client key's: `OWN_KEY` is a `key=` value's.)
            let bucket_key = match key {
                StraightKey::Address(text) => match TableKey::after_limit_marked(
                    limit.requests,
                    limit.window_ms,
                    DEFAULT_KEY_MARK,
                    text,
                ) {
                    Some(bucket_key) => bucket_key,
                    // (Never an IPv4 address's text, 15 bytes at most: the
                    // full path decides.)
                    None => return Ok(None),
                },
                StraightKey::Made(key) => {
                    TableKey::after_limit(limit.requests, limit.window_ms, &[key])
                }
            };
            // A hashed bucket key (a made key over 20 bytes) does not hold
            // the client key: its breaker is searched now, as every time.
            let hashed = bucket_key.is_hashed();
            if hashed && zone.strikes.stats().0 != 0 && !searched_clean(&mut zone.strikes, key) {
                return Ok(None);
            }
            // The bucket first: if it remembers the breaker table's
            // generation, its client has no breaker (nothing inserted
            // since it was found without one), and no key is made to
            // search for one (else made from the bucket's key).
            // (Found without touching its place in the LRU queue: a client
            // with a breaker, declined here, keeps its bucket where it was,
            // as the full path's check, which looks at the breaker first.)
            let found = zone
                .buckets
                .get(&bucket_key)
                .map(|entry| entry as *mut Entry);
            let entry: *mut Entry = match found {
                Some(entry) => {
                    // SAFETY: the entry is in the zone, locked for this closure.
                    let entry = unsafe { &mut *entry };
                    if !hashed && !clean(&mut zone.strikes, &bucket_key, entry) {
                        return Ok(None);
                    }
                    zone.buckets.touch(entry);
                    entry
                }
                None => {
                    // (A client's first request in its window's time.)
                    let generation = zone.strikes.inserted();
                    if !hashed
                        && zone.strikes.stats().0 != 0
                        && !bucket_client_clean(&mut zone.strikes, &bucket_key)
                    {
                        return Ok(None);
                    }
                    let entry = bucket_inserted(zone, alloc, &bucket_key, now.epoch_ms)?;
                    let generation = breaker_generation::remembered(generation);
                    // SAFETY: the entry is in the zone, locked for this closure.
                    unsafe { (*entry).remember_generation(generation) };
                    entry
                }
            };
            // SAFETY: the entry is in the zone, locked for this closure.
            let entry = unsafe { &mut *entry };
            let Some((verdict, keep_until_ms)) = straight.admit(entry.window(), now.monotonic_ms)
            else {
                return Ok(None);
            };
            entry.expires_at_ms = keep_until_ms;
            Ok(Some(verdict))
        },
    )
}

/// Whether the client of `bucket` (a straight path's, found by its
/// inline key `bucket_key`) has no breaker in `strikes`: none at all, or
/// none inserted since the bucket remembered the table's generation
/// (`store::breaker_generation`), else searched, the bucket remembering
/// the generation when none is found.
#[inline(always)]
fn clean(strikes: &mut Table, bucket_key: &TableKey, bucket: &mut Entry) -> bool {
    let generation = strikes.inserted();
    if !breaker_generation::must_search(strikes.stats().0, generation, Some(bucket.generation())) {
        return true;
    }
    let clean = bucket_client_clean(strikes, bucket_key);
    if clean {
        bucket.remember_generation(breaker_generation::remembered(generation));
    }
    clean
}

/// Whether `strikes` has no breaker for the client of `bucket_key` (an
/// inline bucket key of the straight path: its client key after the
/// limit's numbers), searched.
#[cold]
#[inline(never)]
fn bucket_client_clean(strikes: &mut Table, bucket_key: &TableKey) -> bool {
    match bucket_key.after_limit_parts() {
        Some(client) => strikes.find(&client).is_none(),
        // (Not asked of a hashed key: its client is searched by its key.)
        None => false,
    }
}

/// Whether `strikes` has no breaker for `key`'s client, searched.
#[cold]
#[inline(never)]
fn searched_clean(strikes: &mut Table, key: StraightKey) -> bool {
    strikes.find(&key.table_key()).is_none()
}

impl StraightKey<'_> {
    /// The client key's own table key (its breaker's).
    #[inline(always)]
    fn table_key(self) -> TableKey {
        match self {
            StraightKey::Address(text) => TableKey::new(&[&[DEFAULT_KEY_MARK], text]),
            StraightKey::Made(key) => TableKey::new(&[key]),
        }
    }
}

/// What a check expires as it passes (as `limit_req` does): a few stale
/// buckets and breakers (each lives in one queue).
#[inline(always)]
fn expire_for_check(zone: &mut Zone, alloc: &Allocator, now: Now) {
    zone.buckets
        .expire_lru(alloc, now.monotonic_ms, EXPIRE_PER_REQUEST);
    zone.strikes
        .expire_lru(alloc, now.monotonic_ms, EXPIRE_PER_REQUEST);
}

/// The bucket `key` names, found or made (room made for it if the zone
/// has none); a refusal counted when no room could be made.
#[inline(always)]
fn bucket_entry(
    zone: &mut Zone,
    alloc: &Allocator,
    key: &TableKey,
    epoch_ms: u64,
) -> Result<*mut Entry, NoRoom> {
    if let Some(entry) = zone.buckets.find(key) {
        let entry: *mut Entry = entry;
        return Ok(entry);
    }
    bucket_inserted(zone, alloc, key, epoch_ms)
}

/// A new bucket for `key` (absent), room made for it if the zone has
/// none; a refusal counted when no room could be made.
#[inline(always)]
fn bucket_inserted(
    zone: &mut Zone,
    alloc: &Allocator,
    key: &TableKey,
    epoch_ms: u64,
) -> Result<*mut Entry, NoRoom> {
    match insert_making_room(zone, Zone::buckets_mut, 0, key, alloc, epoch_ms) {
        Some(entry) => Ok(entry),
        None => {
            zone.buckets_refused = zone.buckets_refused.wrapping_add(1);
            Err(full(zone, epoch_ms))
        }
    }
}

/// Records a spent record of `owner` (a bot's signature nonce, `digest`)
/// until `until_ms` within its share over `longest_ms`
/// (`store::record`), and runs `then` on what was recorded under the
/// same lock.
pub(super) fn record_owned<R>(
    zone: &SharedZone,
    owner: &[u8],
    digest: &[u8; 32],
    (until_ms, longest_ms): (u64, u64),
    now: Now,
    then: impl FnOnce(&mut Zone, Recorded) -> R,
) -> R {
    let room = Room::Known(zone.spent_room(longest_ms));
    zone.with_locked(|zone, alloc| {
        zone.spent.expire(alloc, now.epoch_ms, EXPIRE_PER_REQUEST);
        let mut tables = Locked {
            zone,
            alloc,
            now,
            room,
        };
        let recorded = store::record(&mut tables, owner, digest, until_ms, longest_ms, now);
        then(tables.zone, recorded)
    })
}

/// Gives up the oldest local refusals for room, but none a worker has yet
/// to take (their strikes would be lost).
pub(super) fn evict_refusals(refusals: &mut Table, alloc: &Allocator) {
    refusals.evict_unless(alloc, EVICT_WHEN_FULL, |entry| {
        !entry.refusal().disposable()
    });
}

/// The zone's tables while its lock is held.
struct Locked<'z> {
    zone: &'z mut Zone,
    alloc: &'z Allocator,
    now: Now,
    room: Room<'z>,
}

/// The part of the zone spent records may take, or what it is worked out
/// from when asked.
#[derive(Clone, Copy)]
enum Room<'z> {
    Known(SpentRoom),
    /// The zone and its records' longest lifetime.
    Of(&'z SharedZone, u64),
}

impl Room<'_> {
    fn get(self) -> SpentRoom {
        match self {
            Room::Known(room) => room,
            Room::Of(zone, lifetime_ms) => zone.spent_room(lifetime_ms),
        }
    }
}

impl Locked<'_> {
    /// [`Tables::breaker`] once the zone has breakers: `key`'s, made if
    /// missing when `create`.
    #[inline(never)]
    fn breaker_found<R>(
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
}

impl Tables for Locked<'_> {
    fn bucket<R>(
        &mut self,
        key: Counted,
        limit: RateLimit,
        f: impl FnOnce(&mut SlidingWindow) -> (R, u64),
    ) -> Result<R, NoRoom> {
        // Each distinct limit counts separately, like separate limit_req
        // zones; a `key=` value's count apart from a client key's.
        let (own, key): (&[u8], _) = match key {
            Counted::Client(key) => (b"", key),
            Counted::Own(value) => (OWN_KEY, value),
            Counted::Spends(key) => (SPENDS_KEY, key),
        };
        let bucket_key = TableKey::after_limit(limit.requests, limit.window_ms, &[own, key]);
        let entry = bucket_entry(self.zone, self.alloc, &bucket_key, self.now.epoch_ms)?;
        // SAFETY: the entry is in the zone, locked for as long as `self`.
        let entry = unsafe { &mut *entry };
        let (result, keep_until_ms) = f(entry.window());
        entry.expires_at_ms = keep_until_ms;
        Ok(result)
    }

    #[inline]
    fn breaker<R>(
        &mut self,
        key: &[u8],
        create: bool,
        f: impl FnOnce(&mut StrikeCounter) -> R,
    ) -> Result<Option<R>, NoRoom> {
        // No breaker in the zone (no client struck lately): nothing to
        // look up, nor a key to make for it (inline: every check asks).
        if !create && self.zone.strikes.stats().0 == 0 {
            return Ok(None);
        }
        self.breaker_found(key, create, f)
    }

    fn spend(&mut self, digest: &[u8; 32], until_ms: u64, now_ms: u64) -> Result<bool, NoRoom> {
        let key = TableKey::new(&[digest]);
        let room = self.room.get();
        let recorded = record_spent(self.zone, self.alloc, &key, until_ms, now_ms, room);
        // A payer or a bot refused for it (the mirror of Redis's spends,
        // which refuses no one, is not counted).
        if recorded.is_err() {
            self.zone.spent_refused = self.zone.spent_refused.wrapping_add(1);
        }
        recorded
    }

    fn spent(&mut self, digest: &[u8; 32], now_ms: u64) -> bool {
        let key = TableKey::new(&[digest]);
        matches!(self.zone.spent.get(&key), Some(entry) if entry.expires_at_ms > now_ms)
    }

    fn spent_room(&self) -> SpentRoom {
        self.room.get()
    }
}

/// Marks `key` (a token digest) spent until `expires_at_ms` in the locked
/// zone; `Ok(false)` if it already was. No new record is made beyond
/// `room.most` records in all.
pub(super) fn record_spent(
    zone: &mut Zone,
    alloc: &Allocator,
    key: &TableKey,
    expires_at_ms: u64,
    now_ms: u64,
    room: SpentRoom,
) -> Result<bool, NoRoom> {
    // Each record goes into the queue of its lifetime class, where
    // insertion order is close to expiry order.
    let class = lifetime_class(expires_at_ms.saturating_sub(now_ms));
    let entry: *mut Entry = match zone.spent.get(key) {
        Some(entry) if entry.expires_at_ms > now_ms => return Ok(false),
        // An expired leftover is reused: that token can't verify any more.
        Some(entry) => {
            let entry: *mut Entry = entry;
            // SAFETY: the entry is in the zone, locked by the caller.
            zone.spent.requeue(unsafe { &mut *entry }, class);
            entry
        }
        None => match spent_room_left(zone, alloc, room, now_ms)
            .then(|| insert_making_room(zone, Zone::spent_mut, class, key, alloc, now_ms))
            .flatten()
        {
            Some(entry) => entry,
            // Not recorded, so not accepted: else it could be replayed.
            None => return Err(full(zone, now_ms)),
        },
    };
    // SAFETY: the entry is in the zone, locked by the caller.
    unsafe { (*entry).expires_at_ms = expires_at_ms };
    Ok(true)
}

/// Whether one more spent record fits within `room.most` (expiring a few
/// when it does not).
fn spent_room_left(zone: &mut Zone, alloc: &Allocator, room: SpentRoom, now_ms: u64) -> bool {
    if zone.spent.stats().0 < room.most {
        return true;
    }
    zone.spent.expire(alloc, now_ms, EVICT_WHEN_FULL);
    zone.spent.stats().0 < room.most
}

/// The breaker entry of `client` in the locked zone, made if missing;
/// `None` if there is no room for it.
pub(super) fn breaker_entry<'z>(
    zone: &'z mut Zone,
    alloc: &Allocator,
    client: &TableKey,
) -> Option<&'z mut Entry> {
    let entry: *mut Entry = match zone.strikes.find(client) {
        Some(entry) => entry,
        None => {
            let epoch_ms = crate::ffi::now_ms();
            insert_making_room(zone, Zone::strikes_mut, 0, client, alloc, epoch_ms)?
        }
    };
    // SAFETY: the entry is in the zone, locked by the caller for as long as
    // the zone is borrowed.
    Some(unsafe { &mut *entry })
}

/// Inserts `key` into the chosen table (at the head of queue `queue`),
/// making room when the zone is full
/// in the core's order (`MAKE_ROOM`): never an unexpired spent record.
pub(super) fn insert_making_room(
    zone: &mut Zone,
    table: fn(&mut Zone) -> &mut Table,
    queue: usize,
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
        if let Some(entry) = table(zone).insert_in(key, alloc, queue) {
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

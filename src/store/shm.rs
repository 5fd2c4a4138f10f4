//! Local mode: leaky buckets and the replay cache in the shared zone.

use super::{CheckArgs, NewWaiter, Poll, Store};
use crate::config::MainConf;
use crate::decision::Checked;
use crate::limiter::bucket;
use crate::limiter::strikes::{Block, RedRules, Standing};
use crate::limiter::Verdict;
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

    /// Whether the replay cache holds `digest` unexpired (cluster mode: a
    /// token the `local` fallback spent while Redis was unavailable).
    pub fn is_spent(&self, digest: &[u8; 32], now_ms: u64) -> bool {
        let key = TableKey::new(&[digest]);
        self.zone.with_locked(
            |zone, _| matches!(zone.spent.find(&key), Some(entry) if entry.expires_at_ms > now_ms),
        )
    }
}

impl Store for ShmStore {
    fn check(&self, args: CheckArgs, now_ms: u64, _: &mut NewWaiter) -> Poll<Checked> {
        // Each distinct limit counts separately, like separate limit_req zones.
        let limit = args.limit;
        let bucket_key = TableKey::new(&[
            &limit.requests.to_le_bytes(),
            &limit.window_ms.to_le_bytes(),
            args.key,
        ]);
        let client = TableKey::new(&[args.key]);
        self.zone.with_locked(|zone, alloc| {
            zone.buckets.expire(alloc, now_ms, EXPIRE_PER_REQUEST);
            zone.strikes.expire(alloc, now_ms, EXPIRE_PER_REQUEST);
            // Red first: a blocked client costs one lookup and writes nothing.
            let mut standing = Standing::default();
            if let Some(entry) = zone.strikes.find(&client) {
                let strikes = entry.strikes();
                standing.strikes = strikes.strikes;
                standing.block = strikes.block(args.rules, now_ms);
                if standing.block != Block::Clear {
                    return Poll::Ready(Checked {
                        verdict: Verdict::default(),
                        standing,
                    });
                }
            }
            let entry: *mut Entry = match zone.buckets.find(&bucket_key) {
                Some(entry) => entry,
                None => match insert_evicting(zone, Zone::buckets_mut, &bucket_key, alloc) {
                    Some(entry) => entry,
                    None => return Poll::Full,
                },
            };
            // SAFETY: the entry is in the zone, locked for this closure.
            let entry = unsafe { &mut *entry };
            let verdict = bucket::admit(entry.bucket(), limit, now_ms);
            entry.expires_at_ms = now_ms.saturating_add(verdict.reset_after_ms);
            if !verdict.allowed && args.offence && args.rules.strikes.is_some() {
                // A strike that finds no room is lost: forgetting one only
                // forgives a client.
                if let Some(struck) = strike_locked(zone, alloc, &client, args.rules, now_ms) {
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
        now_ms: u64,
        _: &mut NewWaiter,
    ) -> Poll<Standing> {
        let client = TableKey::new(&[key]);
        self.zone.with_locked(|zone, alloc| {
            zone.strikes.expire(alloc, now_ms, EXPIRE_PER_REQUEST);
            match strike_locked(zone, alloc, &client, rules, now_ms) {
                Some(standing) => Poll::Ready(standing),
                None => Poll::Full,
            }
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
                    None => return Poll::Full,
                },
            };
            // SAFETY: the entry is in the zone, locked for this closure.
            unsafe { (*entry).expires_at_ms = expires_at_ms };
            Poll::Ready(true)
        })
    }
}

/// One strike for `client` in the locked zone; `None` if there is no room
/// for a new breaker.
fn strike_locked(
    zone: &mut Zone,
    alloc: &Allocator,
    client: &TableKey,
    rules: RedRules,
    now_ms: u64,
) -> Option<Standing> {
    let entry: *mut Entry = match zone.strikes.find(client) {
        Some(entry) => entry,
        None => insert_evicting(zone, Zone::strikes_mut, client, alloc)?,
    };
    // SAFETY: the entry is in the zone, locked by the caller.
    let entry = unsafe { &mut *entry };
    let standing = entry.strikes().strike(rules, now_ms);
    entry.expires_at_ms = entry.strikes().forgotten_at_ms();
    Some(standing)
}

/// Inserts `key` into the chosen table, giving up the least recently used
/// entries when the zone is full: buckets first and breakers next (a
/// forgotten one only forgives a client), spent tokens last (forgetting one
/// reopens a replay for the rest of its lifetime).
fn insert_evicting(
    zone: &mut Zone,
    table: fn(&mut Zone) -> &mut Table,
    key: &TableKey,
    alloc: &Allocator,
) -> Option<*mut Entry> {
    type Pick = fn(&mut Zone) -> &mut Table;
    let give_up: [Option<Pick>; 4] = [
        None,
        Some(Zone::buckets_mut),
        Some(Zone::strikes_mut),
        Some(Zone::spent_mut),
    ];
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

//! A table store in process memory: the order of [`super::run`] over hash
//! maps, with a clock the caller sets. The decision's table tests drive
//! the request loop against it; `down` and `full` make it answer as a dead
//! Redis without fallback or a zone with no room would.

use std::collections::HashMap;

use super::{run, Counted, NoRoom, Now, Op, Reply, SpentRoom, Subject, Tables};
use crate::limiter::breaker::StrikeCounter;
use crate::limiter::window::SlidingWindow;
use crate::limiter::RateLimit;

/// How long a full store asks clients to wait.
const FULL_RETRY_MS: u64 = 1_000;

#[derive(Default)]
pub struct MemoryStore {
    /// Buckets by key and whose count it is, requests and window.
    pub buckets: HashMap<(Vec<u8>, Whose, u32, u64), SlidingWindow>,
    pub breakers: HashMap<Vec<u8>, StrikeCounter>,
    /// Spent digests and until when they are kept (epoch ms).
    pub spent: HashMap<[u8; 32], u64>,
    /// Answer every operation `Down`.
    pub down: bool,
    /// Refuse new spent records (no room).
    pub full: bool,
    /// The part spent records may take (unbounded when `None`).
    pub spent_room: Option<SpentRoom>,
    /// The clock of both scales.
    pub now: Now,
    /// The operations asked, in order.
    pub calls: Vec<Op>,
    /// Buckets looked up (made if missing), all operations together.
    pub bucket_lookups: usize,
}

impl MemoryStore {
    /// Runs one operation at the store's clock.
    pub fn ask(&mut self, op: Op, subject: &Subject) -> Reply {
        self.calls.push(op);
        if self.down {
            return Reply::Down;
        }
        let now = self.now;
        run(self, op, subject, now)
    }

    /// The client's strikes now (0 without a breaker).
    pub fn strikes(&self, key: &[u8]) -> u32 {
        self.breakers.get(key).map_or(0, |s| s.strikes)
    }

    /// Sets both clocks to `ms`.
    pub fn at(&mut self, ms: u64) -> &mut Self {
        self.now = Now {
            monotonic_ms: ms,
            epoch_ms: ms,
        };
        self
    }
}

impl Tables for MemoryStore {
    fn bucket<R>(
        &mut self,
        key: Counted,
        limit: RateLimit,
        f: impl FnOnce(&mut SlidingWindow) -> (R, u64),
    ) -> Result<R, NoRoom> {
        let (key, own) = match key {
            Counted::Client(key) => (key, Whose::Client),
            Counted::Own(value) => (value, Whose::Own),
            Counted::Spends(key) => (key, Whose::Spends),
        };
        self.bucket_lookups += 1;
        let entry = (key.to_vec(), own, limit.requests, limit.window_ms);
        Ok(f(self.buckets.entry(entry).or_default()).0)
    }

    fn breaker<R>(
        &mut self,
        key: &[u8],
        create: bool,
        f: impl FnOnce(&mut StrikeCounter) -> R,
    ) -> Result<Option<R>, NoRoom> {
        if create {
            return Ok(Some(f(self.breakers.entry(key.to_vec()).or_default())));
        }
        Ok(self.breakers.get_mut(key).map(f))
    }

    fn spend(&mut self, digest: &[u8; 32], until_ms: u64, now_ms: u64) -> Result<bool, NoRoom> {
        if self.spent.get(digest).is_some_and(|until| *until > now_ms) {
            return Ok(false);
        }
        let live = self.spent.values().filter(|until| **until > now_ms).count();
        if self.full || live as u64 >= self.spent_room().most {
            return Err(NoRoom {
                retry_after_ms: FULL_RETRY_MS,
            });
        }
        self.spent.insert(*digest, until_ms);
        Ok(true)
    }

    fn spent(&mut self, digest: &[u8; 32], now_ms: u64) -> bool {
        self.spent.get(digest).is_some_and(|until| *until > now_ms)
    }

    fn spent_room(&self) -> SpentRoom {
        self.spent_room.unwrap_or(SpentRoom::UNBOUNDED)
    }
}

/// Whose count a bucket is ([`Counted`] without its key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Whose {
    Client,
    Own,
    Spends,
}

//! A table store in process memory: the order of [`super::run`] over hash
//! maps, with a clock the caller sets. The decision's table tests drive
//! the request loop against it; `down` and `full` make it answer as a dead
//! Redis without fallback or a zone with no room would.

use std::collections::HashMap;

use super::{run, Counted, NoRoom, Now, Op, Reply, Subject, Tables};
use crate::limiter::breaker::StrikeCounter;
use crate::limiter::window::SlidingWindow;
use crate::limiter::RateLimit;

/// How long a full store asks clients to wait.
const FULL_RETRY_MS: u64 = 1_000;

#[derive(Default)]
pub struct MemoryStore {
    /// Buckets by key (`true`: a `key=` value's), requests and window.
    pub buckets: HashMap<(Vec<u8>, bool, u32, u64), SlidingWindow>,
    pub breakers: HashMap<Vec<u8>, StrikeCounter>,
    /// Spent digests and until when they are kept (epoch ms).
    pub spent: HashMap<[u8; 32], u64>,
    /// Answer every operation `Down`.
    pub down: bool,
    /// Refuse new spent records (`Full`).
    pub full: bool,
    /// The clock of both scales.
    pub now: Now,
    /// The operations asked, in order.
    pub calls: Vec<Op>,
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
            Counted::Client(key) => (key, false),
            Counted::Own(value) => (value, true),
        };
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
        if self.full {
            return Err(NoRoom {
                retry_after_ms: FULL_RETRY_MS,
            });
        }
        self.spent.insert(*digest, until_ms);
        Ok(true)
    }
}

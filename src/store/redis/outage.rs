//! What the Redis store does around an outage or a full queue: the node's
//! replay cache consulted and written beside Redis, and the spends the zone
//! decided meanwhile queued and written to Redis once it takes commands
//! again, by the spend script (so that they take back the 429's strike
//! there too), in batches that never crowd out the requests' commands.

use redis_protocol::resp2::types::OwnedFrame;

use super::{RedisStore, MAX_REPLAYS};
use crate::ffi::{monotonic_ms, now_ms};
use pow_shield_core::cluster::replays::Queued;
use pow_shield_core::limiter::breaker::BreakerRules;
use pow_shield_core::redis::command::integers;

/// Queued spends written per request or reconnect: well under the
/// client's cap of commands in flight, so the writes never crowd out the
/// requests' own commands after an outage.
const REPLAY_BATCH: usize = 64;

impl RedisStore {
    /// Whether the node's replay cache holds the token.
    pub(super) fn spent_locally(&self, digest: &[u8; 32], now_ms: u64) -> bool {
        self.cache
            .as_ref()
            .is_some_and(|cache| cache.is_spent(digest, now_ms))
    }

    /// Records a spend Redis accepted in the node's replay cache too, so
    /// that the node refuses the token during a later outage, or after a
    /// Redis that lost its data, and takes back the unpaid strike the zone
    /// may hold for the client (a 429 it decided while Redis was busy or
    /// down). `false`: the cache already held it (spent here while Redis
    /// was down). A cache without room changes nothing: Redis holds the
    /// record.
    pub(super) fn record_locally(
        &self,
        digest: &[u8; 32],
        expires_at_ms: u64,
        now_ms: u64,
        key: &[u8],
        rules: BreakerRules,
    ) -> bool {
        let Some(cache) = &self.cache else {
            return true;
        };
        let recorded = cache.record_spent(digest, expires_at_ms, now_ms);
        if recorded == Ok(true) {
            cache.forgive(key, rules, monotonic_ms());
        }
        !matches!(recorded, Ok(false))
    }

    /// Redis could not take this spend: write it later if the fallback
    /// spent it.
    pub(super) fn queue_replay(
        &self,
        digest: &[u8; 32],
        spent_key: String,
        tag: String,
        expires_at_ms: u64,
    ) {
        if self.cache.is_none() {
            return;
        }
        let Ok(mut replays) = self.replays.try_borrow_mut() else {
            return;
        };
        let queued = replays.push(digest, spent_key, tag, expires_at_ms, now_ms());
        if let Queued::Dropped { .. } = queued {
            pow_shield_core::metrics::redis_replay_dropped();
        }
        if let Queued::Dropped { first: true } = queued {
            error!(
                self.log,
                "pow_shield: {MAX_REPLAYS} tokens spent while redis was unavailable wait to be \
                 written to it; further ones are refused by this node only ({} so far)",
                replays.dropped()
            );
        }
    }

    /// Writes the queued spends the fallback made, now that Redis answers.
    pub(super) fn write_replays(&self) {
        let now = now_ms();
        // Every request comes here: in a cluster with one master down the
        // router is healthy yet that master's tokens are refused, so passes
        // are rationed (`Replays::pass_now`, `hold`).
        let due = match self.replays.try_borrow_mut() {
            Ok(mut replays) => {
                if !replays.pass_now(now) || !self.router.is_healthy() {
                    return;
                }
                replays.take_due(now, REPLAY_BATCH)
            }
            Err(_) => return,
        };
        let mut refused = false;
        for replay in due {
            // Not in the replay cache: the request was not decided by the
            // `local` fallback (`open`, `closed`), so nothing was spent.
            if !self.spent_locally(&replay.digest, now) {
                continue;
            }
            // The spend script, recording whatever the breaker says (the
            // zone decided it), takes back the 429's strike in Redis too
            // when it is the first record of the token. (Whatever the
            // token's `st`: while Redis failed, a check it ran may have
            // struck for a 429 the zone answered without one, so the
            // write takes one back, if Redis holds an unpaid strike:
            // never below 0.)
            let ms = replay.expires_at_ms.saturating_sub(now);
            let call = self.calls.replay(&replay.key, replay.tag.as_bytes(), ms);
            // Whether Redis knew it doesn't matter (this node refuses the
            // token anyway), only that it took it: if not (e.g. a restarted
            // cluster master answers CLUSTERDOWN at first), it waits again.
            let store = self.me.clone();
            let retry = replay.clone();
            let on_reply = Box::new(move |frame: Option<OwnedFrame>| {
                let taken = frame.as_ref().and_then(integers).is_some();
                if let (false, Some(store)) = (taken, store.upgrade()) {
                    store.queue_replay(&retry.digest, retry.key, retry.tag, retry.expires_at_ms);
                }
            });
            // Routed by its own key: in a cluster, its slot.
            let key = replay.key.clone();
            if self.send(key.as_bytes(), call, on_reply).is_err() {
                refused = true;
                self.queue_replay(&replay.digest, replay.key, replay.tag, replay.expires_at_ms);
            }
        }
        if refused {
            if let Ok(mut replays) = self.replays.try_borrow_mut() {
                replays.hold(now);
            }
        }
    }
}

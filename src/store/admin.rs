//! `pow_shield_admin`'s side of the zone (both modes): what the node holds
//! of a client (its breaker, its count under each limit), and the lift of
//! its block and ban (the breaker entry goes). Cluster mode's calls to
//! Redis are `redis/admin.rs`.

use crate::config::MainConf;
use crate::shm::{SharedZone, TableKey};
use pow_shield_core::admin::{BreakerView, LimitView, StoreView};
use pow_shield_core::limiter::window;
use pow_shield_core::limiter::RateLimit;

/// What the zone holds of `key` (no writes, no change of order).
pub fn zone_view(mcf: &MainConf, key: &[u8], limits: &[(RateLimit, bool)]) -> StoreView {
    let Some(zone) = SharedZone::from_conf(mcf) else {
        return StoreView::default();
    };
    let now_ms = crate::ffi::monotonic_ms();
    zone.with_locked(|zone, _| {
        let breaker = zone
            .strikes
            .get(&TableKey::new(&[key]))
            .map(|entry| BreakerView::of_counter(entry.strikes(), now_ms))
            .unwrap_or_default();
        let limits = limits
            .iter()
            .map(|&(limit, approx)| {
                // The zone's bucket key (`zone::Locked::bucket`, per client key).
                let bucket = TableKey::new(&[
                    &limit.requests.to_le_bytes(),
                    &limit.window_ms.to_le_bytes(),
                    key,
                ]);
                let (count, reset_ms) = zone
                    .buckets
                    .get(&bucket)
                    .map_or((0, 0), |e| window::counted_at(e.window(), limit, now_ms));
                LimitView {
                    limit,
                    approx,
                    count,
                    reset_ms,
                }
            })
            .collect();
        StoreView { breaker, limits }
    })
}

/// Forgets the breakers of `keys`: strikes, openings, a block or ban this
/// node counted or learnt from Redis.
pub fn zone_lift(mcf: &MainConf, keys: &[Vec<u8>]) {
    let Some(zone) = SharedZone::from_conf(mcf) else {
        return;
    };
    zone.with_locked(|zone, alloc| {
        for key in keys {
            zone.strikes.remove_key(&TableKey::new(&[key]), alloc);
        }
    })
}

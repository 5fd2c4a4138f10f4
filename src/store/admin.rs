//! `pow_shield_admin`'s side of the zone (both modes): what the node holds
//! of a key (its breaker and its count under each limit as a client, its
//! count under each keyed limit as a `key=` value), and the lift
//! (`pow_shield_core::admin::Lift`: the breaker entries go, and the
//! value's buckets). Cluster mode's calls to Redis are `redis/admin.rs`.

use crate::config::MainConf;
use crate::shm::{SharedZone, TableKey, Zone};
use pow_shield_core::admin::{self, BreakerView, KeyedLimit, Lift, LimitView, StoreView};
use pow_shield_core::limiter::window;
use pow_shield_core::limiter::RateLimit;

/// The zone's bucket key of `value`'s count under `limit` (`zone::Locked::bucket`).
fn bucket_key(limit: RateLimit, own: bool, value: &[u8]) -> TableKey {
    let own: &[u8] = if own { super::zone::OWN_KEY } else { b"" };
    TableKey::new(&[
        &limit.requests.to_le_bytes(),
        &limit.window_ms.to_le_bytes(),
        own,
        value,
    ])
}

/// `key`'s count and reset under each of `limits` (`own`: as a `key=`
/// value), with the zone locked.
fn counts(zone: &mut Zone, key: &[u8], own: bool, limits: &[(RateLimit, bool)]) -> Vec<LimitView> {
    let now_ms = crate::ffi::monotonic_ms();
    limits
        .iter()
        .map(|&(limit, approx)| {
            let (count, reset_ms) = zone
                .buckets
                .get(&bucket_key(limit, own, key))
                .map_or((0, 0), |e| window::counted_at(e.window(), limit, now_ms));
            LimitView {
                name: None,
                limit,
                approx,
                count,
                reset_ms,
            }
        })
        .collect()
}

/// What the zone holds of `client` under `limits`, and of the `key=`
/// value `value` under `keyed` (no writes, no change of order).
pub fn zone_view(
    mcf: &MainConf,
    (client, value): (&[u8], &[u8]),
    limits: &[(RateLimit, bool)],
    keyed: &[KeyedLimit],
) -> StoreView {
    let Some(zone) = SharedZone::from_conf(mcf) else {
        return StoreView::default();
    };
    let now_ms = crate::ffi::monotonic_ms();
    zone.with_locked(|zone, _| {
        let breaker = zone
            .strikes
            .get(&TableKey::new(&[client]))
            .map(|entry| BreakerView::of_counter(entry.strikes(), now_ms))
            .unwrap_or_default();
        let own = counts(zone, value, true, &admin::counted_as(keyed));
        StoreView {
            breaker,
            limits: counts(zone, client, false, limits),
            keyed: admin::keyed_views(&own, keyed),
        }
    })
}

/// Carries out `lift` in the zone: forgets its breakers (strikes,
/// openings, a block or ban this node counted or learnt from Redis) and
/// its values' counts under `keyed`.
pub fn zone_lift(mcf: &MainConf, lift: &Lift, keyed: &[KeyedLimit]) {
    let Some(zone) = SharedZone::from_conf(mcf) else {
        return;
    };
    zone.with_locked(|zone, alloc| {
        for key in &lift.breakers {
            zone.strikes.remove_key(&TableKey::new(&[key]), alloc);
        }
        for value in &lift.values {
            for k in keyed {
                zone.buckets
                    .remove_key(&bucket_key(k.limit, true, value), alloc);
            }
        }
    })
}

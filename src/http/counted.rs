//! A request's decision counted in this worker's metrics slot
//! (`pow_shield_core::metrics`), by the full path (`handler`) and the
//! straight path (`straight`) alike; `status.rs` serves the sums.

use crate::config::{MainConf, Policy};
use pow_shield_core::decision::Final;
use pow_shield_core::metrics::{self, Decided};

/// The decision made counted in this worker's metrics, when it counts
/// (made only then).
#[inline(always)]
pub(super) fn count_decided(mcf: &MainConf, policy: &Policy, done: impl FnOnce() -> Final) {
    metrics::request(|| {
        let done = done();
        let limit = done.verdict.and_then(|v| {
            let at = policy.limits.limit(usize::from(v.limit))?.label?;
            mcf.limit_place(at)
        });
        Decided::new(done, policy.trap).by_limit(limit)
    });
}

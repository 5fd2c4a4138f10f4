//! Rate limiting maths (docs/directives.md, pow_shield_limit): the local-mode sliding window (a
//! ring of counters with the meaning of cluster mode's Redis log), stacked limits, the circuit
//! breaker, and who counts as one client.
//! No nginx types, no clock: callers pass `now_ms` (epoch or monotonic
//! milliseconds, consistently).
#![forbid(unsafe_code)]

pub mod breaker;
pub mod client;
pub mod key_plan;
pub mod limits;
pub mod window;

pub use limits::{stacked_verdict, KeyId, Limit, LimitName, Limits, MAX_LIMITS};

/// `pow_shield_limit <requests> <window>`: at most `requests` requests per
/// client in any sliding `window_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests allowed per window; at least 1 once parsed.
    pub requests: u32,
    /// Window length in milliseconds; at least 1 once parsed.
    pub window_ms: u64,
}

/// One limiter decision and what the rate-limit headers report (docs/protocol.md §2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Whether this request was admitted (and counted).
    pub allowed: bool,
    /// Requests that would be admitted right now, after this one.
    pub remaining: u32,
    /// Milliseconds until the oldest counted request leaves the window; 0
    /// when nothing is counted.
    pub reset_after_ms: u64,
    /// Milliseconds until one more request would be admitted; 0 when this
    /// one was.
    pub retry_after_ms: u64,
    /// Requests refused since the first refusal of the current window,
    /// this one included: how far beyond its limit the limit's key (the
    /// client, or its own `key=`) keeps going, paying or not. Rising
    /// difficulty reads it: a refusal's price, and an admitted request's
    /// next challenge (SPEC §4, "Paying ahead"), which a store reports it
    /// for only when one is priced from it (`store::Checked`); else 0.
    pub over: u32,
    /// Which of the location's limits this verdict is of (stacked limits,
    /// `limits::stacked_verdict`); 0 with one limit.
    pub limit: u8,
}

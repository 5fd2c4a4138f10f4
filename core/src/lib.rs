//! pow-shield's pure core: everything the module decides without nginx, as
//! plain Rust with unit tests (`cargo test -p pow-shield-core`). The module
//! crate (`src/`) keeps only what touches nginx and calls into this one;
//! the fuzz targets and benches depend on it too.
//!
//! - `limiter`: the sliding window, stacked limits, the circuit breaker,
//!   who counts as one client;
//! - `cluster`: what cluster mode decides without I/O: the Redis scripts
//!   (Lua parts, one composer, each mode's set) and their replies;
//! - `decision`: one request's decision, step by step, table-tested;
//! - `headers`: the numbers of the rate-limit headers;
//! - `log_summary`: the rejection lines under a flood, one summary per
//!   client and interval;
//! - `metrics`: the counters a worker keeps and the Prometheus text;
//! - `values`: the directives' value parsers;
//! - `redis`: RESP framing, script calls, the pipeline, the cluster map,
//!   health and back-off, replays, the `pow_shield_redis` URL.
#![forbid(unsafe_code)]

pub mod cluster;
pub mod config;
pub mod decision;
pub mod headers;
pub mod limiter;
pub mod log_summary;
pub mod metrics;
pub mod redis;
pub mod store;
pub mod values;

pub use pow_shield_protocol as protocol;

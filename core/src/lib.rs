//! pow-shield's pure core: everything the module decides without nginx, as
//! plain Rust with unit tests (`cargo test -p pow-shield-core`). The module
//! crate (`src/`) keeps only what touches nginx and calls into this one;
//! the fuzz targets and benches depend on it too.
//!
//! - `limiter`: the sliding window, stacked limits, the circuit breaker,
//!   who counts as one client;
//! - `decision`: one request's decision, step by step, table-tested;
//! - `headers`: the numbers of the rate-limit headers;
//! - `log_summary`: the rejection lines under a flood, one summary per
//!   client and interval;
//! - `metrics`: the counters a worker keeps and the Prometheus text;
//! - `config`: the directives: what each word means, which word a refusal
//!   names, how a location inherits its settings;
//! - `syntax`: how directive values are written (times, sizes, numbers,
//!   keywords), below `config`, the Redis URL and the decision that read them;
//! - `cluster`: cluster mode above the Redis client: the Lua scripts (parts,
//!   one composer, each mode's set) and their replies, what each operation
//!   sends Redis, who decides what Redis did not answer, local refusals,
//!   replays, the generations a worker knows;
//! - `admin`: `pow_shield_admin`: the keys a `key=` names, its Redis calls
//!   and replies, the JSON answered;
//! - `redis`: RESP framing, script calls, the pipeline, the cluster map,
//!   health and back-off, the `pow_shield_redis` URL.
#![forbid(unsafe_code)]

pub mod admin;
pub mod cluster;
pub mod config;
pub mod decision;
pub mod headers;
pub mod limiter;
pub mod log_summary;
pub mod metrics;
pub mod redis;
pub mod store;
pub mod syntax;

pub use pow_shield_protocol as protocol;

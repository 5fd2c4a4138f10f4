//! The module's pure sources (no nginx types), compiled into this crate as
//! they are, so the fuzz targets need no nginx symbols; the protocol is its
//! own crate. `limiter`, `pow`, `decision` and `metrics` keep the module's
//! crate paths, which `config/values.rs` and `redis/pipeline.rs` use.
#![allow(dead_code, unused_imports)]

#[path = "../../src/limiter/mod.rs"]
pub mod limiter;
pub use pow_shield_protocol as pow;
// `redis::pipeline` stamps commands with `metrics::Sent`; metrics counts
// requests by `decision`'s outcomes. Counting stays off here (no slot).
#[path = "../../src/decision/mod.rs"]
pub mod decision;
#[path = "../../src/metrics/mod.rs"]
pub mod metrics;

// Mounted at the root: `#[path]` inside an inline module resolves against
// a directory that would have to exist.
#[path = "../../src/config/values.rs"]
#[doc(hidden)]
pub mod config_values;
#[path = "../../src/redis/cluster.rs"]
#[doc(hidden)]
pub mod redis_cluster;
#[path = "../../src/redis/command.rs"]
#[doc(hidden)]
pub mod redis_command;
#[path = "../../src/redis/pipeline.rs"]
#[doc(hidden)]
pub mod redis_pipeline;
#[path = "../../src/redis/script_call.rs"]
#[doc(hidden)]
pub mod redis_script_call;
#[path = "../../src/redis/url.rs"]
#[doc(hidden)]
pub mod redis_url;
// `redis/pipeline.rs` reaches its sibling as `super::command`.
#[doc(hidden)]
pub use redis_command as command;

pub mod config {
    pub use crate::config_values as values;
}

pub mod redis {
    pub use crate::redis_cluster as cluster;
    pub use crate::redis_command as command;
    pub use crate::redis_pipeline as pipeline;
    pub use crate::redis_script_call as script_call;
    pub use crate::redis_url as url;
}

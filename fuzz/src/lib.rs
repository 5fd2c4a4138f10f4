//! The module's pure sources (no nginx types), compiled into this crate as
//! they are, so the fuzz targets need no nginx symbols; the protocol is its
//! own crate. `limiter` and `pow` keep the module's crate paths, which
//! `config/values.rs` uses.
#![allow(dead_code, unused_imports)]

#[path = "../../src/limiter/mod.rs"]
pub mod limiter;
pub use pow_shield_protocol as pow;

// Mounted at the root: `#[path]` inside an inline module resolves against
// a directory that would have to exist.
#[path = "../../src/config/values.rs"]
#[doc(hidden)]
pub mod config_values;
#[path = "../../src/redis/command.rs"]
#[doc(hidden)]
pub mod redis_command;
#[path = "../../src/redis/url.rs"]
#[doc(hidden)]
pub mod redis_url;

pub mod config {
    pub use crate::config_values as values;
}

pub mod redis {
    pub use crate::redis_command as command;
    pub use crate::redis_url as url;
}

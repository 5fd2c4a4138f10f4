//! Cluster mode's pure parts, above the Redis client (`redis`): who
//! decides what Redis did not answer (`fallback`).

pub mod fallback;

//! Cluster mode's pure parts, above the Redis client (`redis`): what each
//! operation sends Redis and what its answers mean (`calls`); who decides
//! what Redis did not answer (`fallback`); the refusals a node decides
//! itself until Redis's `T` and their batches (`refusals`); the spends to
//! write after an outage (`replays`); the data generations a worker knows
//! (`tracker`).

pub mod calls;
pub mod fallback;
pub mod refusals;
pub mod replays;
pub mod tracker;

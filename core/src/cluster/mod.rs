//! Cluster mode's pure parts, above the Redis client (`redis`): the Lua
//! scripts Redis runs for every operation (`scripts`: their parts, the one
//! composer, each mode's set, the decoding of their replies); what each
//! operation sends Redis and what its answers mean (`calls`); who decides
//! what Redis did not answer (`fallback`); the refusals a node decides
//! itself until Redis's `T` and their batches (`refusals`); the spends to
//! write after an outage (`replays`); the data generations a worker knows
//! (`tracker`) and what a generation is (`generation`); the key layout
//! (`keys`).

pub mod calls;
pub mod fallback;
pub mod generation;
pub mod keys;
pub mod node;
pub mod refusals;
pub mod replays;
pub mod scripts;
pub mod tracker;

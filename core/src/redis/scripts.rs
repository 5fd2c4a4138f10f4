//! The scripts' old home, kept for their callers until they use
//! `cluster::scripts` (`Scripts::for_mode`): every item here is an alias of
//! one there.

pub use crate::cluster::scripts::args::{offence, rules, spend_mode, write_member, BATCH_CLIENTS};
pub use crate::cluster::scripts::replies::{
    batch_from_reply, batch_text, batches_from_reply, coalesced_from_reply, spent_from_reply,
    standing_from_reply, verdict_from_reply, Coalesced, ReplyError, MAX_COALESCED, REPLY_LEN,
};
pub use crate::cluster::scripts::script_sha1;
use crate::cluster::scripts::ONE_REDIS;

/// `Scripts::for_mode(false).window`.
pub const SLIDING_WINDOW_SCRIPT: &str = ONE_REDIS.window;
/// `Scripts::for_mode(false).approx`.
pub const APPROX_SCRIPT: &str = ONE_REDIS.approx;
/// `Scripts::for_mode(_).strike`.
pub const STRIKE_SCRIPT: &str = ONE_REDIS.strike;
/// `Scripts::for_mode(_).spend`.
pub const SPEND_SCRIPT: &str = ONE_REDIS.spend;
/// `Scripts::for_mode(_).batch`.
pub const BATCH_SCRIPT: &str = ONE_REDIS.batch;

/// Several limits in one call.
pub mod stacked {
    pub use crate::cluster::scripts::replies::{
        stacked_verdict_from_reply, ONE_LIMIT, STACKED_REPLY_LEN,
    };

    /// `Scripts::for_mode(false).stacked`.
    pub const STACKED_SCRIPT: &str = crate::cluster::scripts::ONE_REDIS.stacked;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_batch_reply_fits_a_bulk_string_the_node_accepts() {
        let worst = vec![u64::MAX.to_string(); 5 * BATCH_CLIENTS].join(" ");
        assert!(worst.len() <= crate::redis::command::MAX_BULK);
    }
}

//! Several clients' checks in one call (`Scripts::checks`): what the node
//! gathers (`cluster::node`'s `gather.rs`) goes to Redis as one `EVALSHA`,
//! and its one reply is cut into each client's.

use super::{Call, Calls};
use crate::cluster::keys::{self, ClientKey};
use crate::cluster::scripts::{args, replies};
use crate::limiter::breaker::BreakerRules;
use crate::limiter::RateLimit;
use crate::store::Offence;

/// Most clients one call checks: its reply, ten integers each (a Redis
/// Cluster's eleven, the last a generation of up to 16 digits), stays
/// within a bulk string the node accepts (`redis::command::MAX_BULK`:
/// 16 × 11 × 21 bytes at most).
pub const MAX_GATHERED: usize = 16;

/// One client's check of one request under one exact limit.
#[derive(Clone, Copy, Debug)]
pub struct CheckOf<'a> {
    /// The client's hash tag (every client of a call in one slot).
    pub tag: &'a [u8],
    pub limit: RateLimit,
    pub rules: BreakerRules,
    pub offence: Offence,
    /// Makes the sorted set's member unique.
    pub seq: u64,
}

impl Calls {
    /// The checks of `checks` (at most [`MAX_GATHERED`], all in one slot)
    /// in one call: each as the window script's for one request.
    pub fn checks(&self, checks: &[CheckOf]) -> Call {
        let prefix = self.prefix.as_bytes();
        let n = checks.len();
        let script = &self.scripts.checks;
        let mut call =
            super::ScriptCall::new(&script.sha1, 5 * n + usize::from(self.cluster), 8 * n + 1);
        for c in checks {
            let key = |which| move |w: &mut Vec<u8>| keys::write(w, prefix, c.tag, which);
            call.push(key(ClientKey::Window(c.limit)))
                .push(key(ClientKey::Refused(c.limit)));
            self.breaker_keys(&mut call, c.tag);
        }
        if let Some(first) = checks.first() {
            self.slot_key(&mut call, first.tag);
        }
        for c in checks {
            call.num(c.limit.requests.into())
                .num(c.limit.window_ms)
                .push(|w| args::write_member(w, self.node_id, self.pid, c.seq))
                .num(args::offence(c.offence));
            for rule in args::rules(c.rules) {
                call.num(rule);
            }
        }
        call.deadline();
        Call::of(script, call)
    }
}

/// Each client's integers of a [`Calls::checks`] reply (`text`, the bulk
/// string) for `n` clients, as the window script answers one; `None` if it
/// is not such a reply.
pub fn checks_reply(text: &[u8], n: usize, cluster: bool) -> Option<Vec<Vec<i64>>> {
    let each = replies::REPLY_LEN + usize::from(cluster);
    let ints = replies::batch_text(text)?;
    if n == 0 || ints.len() != each * n {
        return None;
    }
    Some(ints.chunks(each).map(<[i64]>::to_vec).collect())
}

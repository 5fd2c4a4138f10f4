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
}

impl CheckOf<'_> {
    /// What the clients of one set share in a call.
    fn set(&self) -> (RateLimit, BreakerRules, Offence) {
        (self.limit, self.rules, self.offence)
    }
}

impl Calls {
    /// The checks of `checks` (at most [`MAX_GATHERED`], all in one slot)
    /// in one call: each as the window script's for one request. Clients
    /// in a row under the same limit, rules and offence share their
    /// arguments (a set). `seq` makes the call's member unique (one for
    /// all: each client's admission goes in a log of its own).
    pub fn checks(&self, checks: &[CheckOf], seq: u64) -> Call {
        let prefix = self.prefix.as_bytes();
        let n = checks.len();
        let script = &self.scripts.checks;
        let sets = checks.chunk_by(|a, b| a.set() == b.set());
        // One Redis: each client's log alone (the script names its other
        // keys); a Redis Cluster: its five keys, all declared.
        let per = if self.cluster { 5 } else { 1 };
        let keys = per * n + usize::from(self.cluster);
        let argv = 2 + 8 * sets.clone().count() + usize::from(n > 0);
        let mut call = super::ScriptCall::new(&script.sha1, keys, argv);
        for c in checks {
            let key = |which| move |w: &mut Vec<u8>| keys::write(w, prefix, c.tag, which);
            call.push(key(ClientKey::Window(c.limit)));
            if self.cluster {
                call.push(key(ClientKey::Refused(c.limit)));
                self.breaker_keys(&mut call, c.tag);
            }
        }
        if let Some(first) = checks.first() {
            self.slot_key(&mut call, (first.tag, None));
        }
        call.num(sets.clone().count() as u64);
        for set in sets {
            let Some(c) = set.first() else { continue };
            call.num(set.len() as u64)
                .num(c.limit.requests.into())
                .num(c.limit.window_ms)
                .num(args::offence(c.offence));
            for rule in args::rules(c.rules) {
                call.num(rule);
            }
        }
        if n > 0 {
            call.push(|w| self.member(w, seq));
        }
        call.deadline();
        Call::of(script, call)
    }
}

/// Each client's integers of a [`Calls::checks`] reply (`text`, the bulk
/// string) for clients under `limits` in turn, as the window script
/// answers one; `None` if it is not such a reply.
pub fn checks_reply(text: &[u8], limits: &[RateLimit], cluster: bool) -> Option<Vec<Vec<i64>>> {
    let each = replies::REPLY_LEN + usize::from(cluster);
    let mut words = core::str::from_utf8(text).ok()?.split(' ');
    let mut out = Vec::with_capacity(limits.len());
    for limit in limits {
        let mut ints = Vec::with_capacity(each);
        match words.next()? {
            // A client new in its window, admitted, without strikes.
            "n" => {
                ints.extend([1, i64::from(limit.requests) - 1]);
                ints.push(i64::try_from(limit.window_ms).ok()?);
                ints.resize(each, 0);
            }
            first => {
                ints.push(first.parse().ok()?);
                for _ in 1..each {
                    ints.push(words.next()?.parse().ok()?);
                }
            }
        }
        out.push(ints);
    }
    words.next().is_none().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN: RateLimit = RateLimit {
        requests: 10,
        window_ms: 60_000,
    };

    #[test]
    fn a_checks_reply_gives_each_client_the_window_scripts_integers() {
        let refused = [0, 0, 0, 900, 1, 1, 0, 0, 0, 1];
        let text = b"n 0 0 0 900 1 1 0 0 0 1 n";
        let new = vec![1, 9, 60_000, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            checks_reply(text, &[TEN; 3], false),
            Some(vec![new.clone(), refused.to_vec(), new.clone()])
        );
        // A Redis Cluster's: the slot's generation after each but 'n'.
        let text = b"0 0 0 900 1 1 0 0 0 1 1765000000123456 n";
        let mut with_gen = refused.to_vec();
        with_gen.push(1_765_000_000_123_456);
        let mut new_gen = new.clone();
        new_gen.push(0);
        assert_eq!(
            checks_reply(text, &[TEN; 2], true),
            Some(vec![with_gen, new_gen])
        );
    }

    #[test]
    fn a_checks_reply_of_another_shape_is_none() {
        for (text, n) in [
            (&b"n n"[..], 1),
            (b"n", 2),
            (b"0 0 0", 1),
            (b"n x", 2),
            (b"", 1),
            (b"n  n", 2),
        ] {
            assert_eq!(checks_reply(text, &vec![TEN; n], false), None, "{text:?}");
        }
    }
}

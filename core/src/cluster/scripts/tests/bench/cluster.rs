//! The tables again, on a Redis Cluster's scripts: each row's call built
//! as the node builds it (`Calls` in cluster mode: the client's keys under
//! its hash tag, the slot's generation key, the deadline) and its reply
//! read as the node reads it. The one-Redis run beside it builds its calls
//! by hand; this one proves the cluster's own scripts (their breaker trips,
//! bans, waits taken back, the approximate counter) decide as the model
//! does.

use super::{Bench, Outcome, Step, KEY};
use crate::cluster::calls::{checked, counted, stacked_checked, BatchOf, Calls};
use crate::cluster::refusals::Sending;
use crate::cluster::scripts::replies::{
    batch_text, batches_from_reply, coalesced_from_reply, spent_from_reply, split_generation,
    struck_from_reply,
};
use crate::redis::command::client_tag;
use crate::store::{Offence, Solution};
use redis_protocol::resp2::types::OwnedFrame;

/// A Redis Cluster's calls under `prefix` (its scripts loaded by
/// [`load`]).
pub(super) fn calls(prefix: &str) -> Calls {
    Calls::new(&format!("{prefix}:cluster:"), 7, 1, true)
}

/// Loads a Redis Cluster's scripts (before the table's clock starts).
pub(super) fn load(redis: &mut super::Redis) {
    super::super::load(redis, &calls("load"));
}

impl Bench<'_> {
    /// The cluster scripts' answers to one row, asked at `now` (Redis's
    /// clock, for a spend's record).
    pub(super) fn cluster_lua(&mut self, calls: &Calls, step: Step, now: u64) -> Vec<Outcome> {
        let tag = client_tag(KEY);
        let tag = tag.as_bytes();
        let subject = self.subject();
        let rules = self.table.rules;
        self.seq += 1;
        let limit = self.limits.first();
        match step {
            Step::Check(offence) => {
                let call = calls.check(tag, &subject, offence, 1, self.seq);
                let reply = super::super::ints(&self.redis.raw(&call.evalsha));
                let got = match self.limits.len() {
                    1 => checked(true, &reply, self.limits, rules, offence),
                    _ => stacked_checked(
                        true,
                        &reply,
                        (&counted(&subject).0, &counted(&subject).1),
                        rules,
                        offence,
                    ),
                };
                vec![Outcome::checked(&got.expect("a check's reply"))]
            }
            Step::Coalesced(k) => {
                let call = calls.check(tag, &subject, Offence::Unpaid, k, self.seq);
                let reply = super::super::ints(&self.redis.raw(&call.evalsha));
                // (A refusal answers the slot's generation too, as the
                // node reads it.)
                let (reply, _) = split_generation(&reply, true);
                let limit = limit.expect("a coalesced table has one limit");
                let c = coalesced_from_reply(reply, limit, k).expect("a coalesced reply");
                (0..k)
                    .map(|i| Outcome::checked(&c.nth(i, k, rules)))
                    .collect()
            }
            Step::Strike => {
                let call = calls.strike(tag, rules);
                let reply = super::super::ints(&self.redis.raw(&call.evalsha));
                vec![Outcome::struck(
                    &struck_from_reply(&reply, rules).expect("a strike's reply"),
                )]
            }
            Step::Spend(n, _) | Step::SpendWaitedOut(n) => {
                let solution = Solution {
                    digest: [n; 32],
                    spent_until_ms: now + 60_000,
                    generation: None,
                    forgive: !matches!(step, Step::Spend(_, false)),
                    // Waited out: its 429's Retry-After ended before now.
                    retry_at_ms: matches!(step, Step::SpendWaitedOut(_)).then_some(now),
                };
                let spent_key = calls.spent_key(&solution.digest, KEY);
                let call = calls.spend(&spent_key, tag, &solution, rules, None, now);
                let reply = super::super::ints(&self.redis.raw(&call.evalsha));
                vec![Outcome::spent(
                    spent_from_reply(&reply).expect("a spend's reply"),
                )]
            }
            Step::Batch(n) => {
                self.batched += n;
                let batch = BatchOf {
                    tag,
                    limit: limit.expect("a batch's table has one limit"),
                    rules,
                    sending: Sending {
                        run: 1,
                        total: self.batched.into(),
                        base: 0,
                    },
                };
                let text = match self.redis.raw(&calls.batch(&[batch]).evalsha) {
                    OwnedFrame::BulkString(t) => t,
                    other => panic!("batch: {other:?}"),
                };
                let ints = batch_text(&text).expect("a batch's reply");
                let (over, b) = batches_from_reply(&ints, 1).expect("one client's")[0];
                vec![Outcome::batched(over, b, b.tripped)]
            }
        }
    }
}

//! A Redis Cluster's check of limits whose counts lie in several slots (a
//! client's own, its /24's, the site's: `key=`): one call per slot
//! in one round, pipelined on each master's connection
//! (`Calls::parts`), gathered with other requests' parts of its slot
//! (`stacks.rs`); a part of one limit goes by a script of its own
//! (`Part::alone`: window, approx, count or standing; gathered counts by
//! the counts script). Each call counts the request under its limits
//! only if all of them have room; the request is admitted when every call
//! admitted it, and when one refused, what the others counted is taken
//! back (`Calls::undo`): counted by all or by none.
//!
//! The bound: two nodes racing never over-admit (every count is atomic in
//! its slot and never passes its limit); a request refused in one slot may
//! hold a place in another for one round trip, until its undo, so a racing
//! request may be refused there meanwhile (under-admission, never more
//! than the requests in flight). An undo Redis never runs (a timeout)
//! leaves that count until the window slides past it.
//!
//! With `approx`, a take-back just past a fixed window's end takes one
//! from the new window's count: one more admitted at most per such undo.
//!
//! A call that refuses decides, whatever another call's failure. Otherwise
//! a call that fails (a timeout, a shard down) leaves the request to the
//! fallback rule, `pow_shield_fail` as for any call (never a 5xx unless
//! `closed`); what the other calls counted stays (the request may pass).

use std::collections::hash_map::Entry;

use super::check::{Stack, Then};
use super::keyed::KeyedLimit;
use super::{remember, Around, ClusterNode, Command, Flight, Ids, Step, Waits};
use crate::cluster::calls::{self, Part};
use crate::cluster::fallback::{Answer, Unavailable};
use crate::limiter::breaker::{opened_block, Block, BreakerRules};
use crate::redis::command::Tag;
use crate::store::{Checked, Now, Offence, Reply, Subject};

/// One request's calls on their way.
pub(super) struct Sharded<W> {
    waiter: W,
    key: Vec<u8>,
    /// The slot of the client's keys (its part's, the first).
    slot: u16,
    rules: BreakerRules,
    /// The request's member in every call (for an undo).
    seq: u64,
    /// Each part (its call's, made in place here: `Calls::parts_in`), and
    /// its answer as it comes (what an undo takes back).
    parts: Vec<KeptPart>,
    /// The location's limits keyed as the node keeps their refusals.
    limits: Vec<KeyedLimit>,
    asked_ms: u64,
}

/// One part of a request's check, and its call's answer once it came.
pub(super) struct KeptPart {
    part: Part,
    got: Option<Got>,
}

impl From<Part> for KeptPart {
    fn from(part: Part) -> KeptPart {
        KeptPart { part, got: None }
    }
}

impl AsRef<Part> for KeptPart {
    fn as_ref(&self) -> &Part {
        &self.part
    }
}

impl AsMut<Part> for KeptPart {
    fn as_mut(&mut self) -> &mut Part {
        &mut self.part
    }
}

/// Part `index` of `request`'s check (none: its request is decided).
pub(super) fn part_of<W>(
    sharded: &Ids<u64, Sharded<W>>,
    request: u64,
    index: usize,
) -> Option<&Part> {
    let kept = sharded.get(&request)?.parts.get(index)?;
    Some(&kept.part)
}

/// What one part's call answered.
#[derive(Clone, Copy, Debug)]
enum Got {
    Checked(Checked),
    /// No reply of the script's (`sent`: Redis may have run it).
    Failed {
        failure: Unavailable,
        sent: bool,
    },
}

impl<W: Waits> ClusterNode<W> {
    /// Sends the calls of a check whose limits lie in several slots.
    pub(super) fn check_sharded(
        &mut self,
        env: &mut impl Around,
        (subject, tag, slot): (&Subject, Tag, u16),
        (offence, limits, seq): (Offence, Vec<KeyedLimit>, u64),
        now: Now,
        waiter: W,
        out: &mut Vec<Step<W>>,
    ) {
        // (The client's tag routes its part, the first: never none.)
        // (`slot`: the client's, its part's.)
        let mut parts = self.spare.parts.take();
        self.calls
            .parts_in((tag, Some(slot)), subject, offence, &mut parts);
        self.next_request = self.next_request.wrapping_add(1);
        let request = self.next_request;
        let n = parts.len();
        self.sharded.insert(
            request,
            Sharded {
                waiter,
                key: self.spare.key(subject.key),
                slot,
                rules: subject.rules,
                seq,
                parts,
                limits,
                asked_ms: now.monotonic_ms,
            },
        );
        // Each with the stacked checks of its slot on their way
        // (`stacks.rs`).
        for index in 0..n {
            let stack = Stack {
                seq,
                then: Then::Part { request, index },
            };
            self.stack(env, stack, now, out);
        }
    }

    /// The answer to one part (`alone`: its own call, by the script
    /// `Part::alone` names).
    pub(super) fn part_answered(
        &mut self,
        env: &mut impl Around,
        (request, index): (u64, usize),
        alone: bool,
        answer: Answer,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let cluster = self.cluster;
        let sent = answer.may_have_run();
        // (A part of no limit, the client's where every limit is another
        // slot's, reads as admitted with the client's breaker; the verdict
        // names the location's limit; a `key=` limit's refusal strikes no
        // one.)
        let got = |part: &Part| {
            let checked = answer
                .integers()
                .and_then(|reply| calls::part_checked(cluster, &reply, part, alone));
            match checked {
                Some(checked) => Got::Checked(checked),
                None => Got::Failed {
                    failure: Unavailable::Down,
                    sent,
                },
            }
        };
        self.part_got(env, (request, index), got, now, out);
    }

    /// One part's call was never sent (`failure`).
    pub(super) fn part_unsent(
        &mut self,
        env: &mut impl Around,
        (request, index): (u64, usize),
        failure: Unavailable,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let got = |_: &Part| Got::Failed {
            failure,
            sent: false,
        };
        self.part_got(env, (request, index), got, now, out);
    }

    /// Part `index` of `request` got what `got` reads (from the part); the
    /// request is decided once every part did.
    fn part_got(
        &mut self,
        env: &mut impl Around,
        (request, index): (u64, usize),
        got: impl FnOnce(&Part) -> Got,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let Entry::Occupied(mut entry) = self.sharded.entry(request) else {
            return;
        };
        let sharded = entry.get_mut();
        if let Some(kept) = sharded.parts.get_mut(index) {
            kept.got = Some(got(&kept.part));
        }
        if sharded.parts.iter().any(|kept| kept.got.is_none()) {
            return;
        }
        let sharded = entry.remove();
        self.decide_sharded(env, sharded, now, out);
    }

    /// Every part answered: the request's answer, and the undos. A part's
    /// refusal (or the client's block) decides, whatever another part's
    /// failure; a failure decides where the client's part failed, or every
    /// part that answered admitted: the fallback rule, told whether Redis
    /// may have struck (only the client's part strikes).
    fn decide_sharded(
        &mut self,
        env: &mut impl Around,
        s: Sharded<W>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        // (Every part answered: none is left out. Read in place: a
        // `Checked` copied once, the one that decides.)
        let got = || s.parts.iter().filter_map(|kept| kept.got.as_ref());
        let fall_back = |waiter, failure, sent| Step::FallBack {
            waiter,
            failure,
            sent,
        };
        let client = match got().next() {
            Some(Got::Checked(client)) => *client,
            Some(&Got::Failed { failure, sent }) => {
                return out.push(fall_back(s.waiter, failure, sent))
            }
            None => return out.push(fall_back(s.waiter, Unavailable::Down, false)),
        };
        let answered = || {
            got().filter_map(|g| match g {
                Got::Checked(c) => Some(c),
                Got::Failed { .. } => None,
            })
        };
        let blocked = client.breaker.block != Block::Clear;
        // The first refusing limit in the order written decides; admitted,
        // the one with fewest remaining.
        let refusing = answered()
            .filter(|c| !c.verdict.allowed)
            .min_by_key(|c| c.verdict.limit);
        if let (false, None, Some(failure)) = (
            blocked,
            refusing,
            got().find_map(|g| match *g {
                Got::Failed { failure, .. } => Some(failure),
                Got::Checked(_) => None,
            }),
        ) {
            // (The client's part admitted: it struck nothing.)
            return out.push(fall_back(s.waiter, failure, false));
        }
        let slot = s.slot;
        self.generations.note_slot(slot, client.generation);
        remember(env, &s.key, client.breaker, s.rules, now);
        // A refusal in another slot: the challenge carries the client's
        // slot's generation as this worker knows it.
        let generation = client.generation.or(self.generations.slot(slot));
        let decided = match (blocked, refusing) {
            (true, _) => client,
            (false, Some(refused)) => Checked {
                breaker: client.breaker,
                // (Only the client's part strikes: its own limit refused.)
                struck: client.struck,
                generation,
                ..*refused
            },
            (false, None) => {
                let tightest = answered()
                    .min_by_key(|c| c.verdict.remaining)
                    .copied()
                    .unwrap_or(client);
                Checked {
                    breaker: client.breaker,
                    generation,
                    ..tightest
                }
            }
        };
        // Counted by all or none: what the parts that admitted counted is
        // taken back when another refused (or the client is blocked).
        if blocked || refusing.is_some() {
            for KeptPart { part, got } in &s.parts {
                if matches!(got, Some(Got::Checked(c)) if c.verdict.allowed) {
                    if let Some(call) = self.calls.undo(part, s.seq) {
                        let route = part.route.to_vec();
                        self.send(Flight::Undo, route, Command::Script(call), out);
                    }
                }
            }
        }
        self.learn_keyed(env, (&s.limits, s.rules), &decided, s.asked_ms, now);
        out.push(Step::Deliver(s.waiter, Reply::Checked(decided)));
        self.spare.keys.give(s.key);
        self.spare.limits.give(s.limits);
        self.spare.parts.give(s.parts);
    }

    /// What a stacked check's answer teaches the node: a refusal by a
    /// limit's key holds until its `T`; a block (or the strike that opened
    /// one) supersedes the client's own refusals.
    pub(super) fn learn_keyed(
        &mut self,
        env: &mut impl Around,
        (limits, rules): (&[KeyedLimit], BreakerRules),
        checked: &Checked,
        asked_ms: u64,
        now: Now,
    ) {
        let keep = opened_block(&checked.breaker, rules).unwrap_or(checked.breaker);
        let refusing = limits.iter().find(|l| l.at == checked.verdict.limit);
        match (checked.verdict.allowed, keep.block, refusing) {
            // Refused by this limit's key until `T`: so are the next
            // requests it counts, here.
            (false, Block::Clear, Some(limit)) => {
                env.learn_refusal(&limit.refusal, &checked.verdict, &checked.breaker, asked_ms)
            }
            (_, Block::Clear, _) => {}
            // Blocked: once the block ends Redis decides again.
            _ => {
                for limit in limits.iter().filter(|l| l.own) {
                    env.forget_refusal(&limit.refusal, now.monotonic_ms);
                }
            }
        }
    }
}

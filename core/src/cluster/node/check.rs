//! Checks: a request under the location's one limit is refused on the
//! node while Redis's refusal holds (`batches.rs`), joins a check of the
//! same client on its way, or asks Redis; stacked or keyed limits are
//! refused on the node while a limit's key is refused (`keyed.rs`), else
//! go to Redis in one call (a Redis Cluster with `key=`: one per slot,
//! `sharded.rs`), gathered with other requests' of the slot (`stacks.rs`),
//! as are checks under one `approx` limit.
//!
//! Coalescing: while a client's check is on its way, the client's further
//! unpaid requests (same limit, exact window) join it instead of sending
//! their own. When its answer comes, a refusal leaves `T` in the zone and
//! the joined requests are refused on the node; otherwise they go together
//! in one call for `k` requests (the script admits up to the free slots
//! and reports the rest), which later requests join in turn. A burst of
//! one client costs one or two script calls, not one per request.

use crate::redis::command::Frame;

use super::keyed::KeyedLimit;
use super::{remember, Answered, Around, ClusterNode, Fell, Flight, Step, Waits};
use crate::cluster::calls::{self, single_limit, Part};
use crate::cluster::fallback::{node_answers, Answer, Ints, Known, Unavailable};
use crate::cluster::generation::slot_of_tag;
use crate::cluster::keys;
use crate::cluster::refusals::{refusal_key, RefusalKey};
use crate::cluster::scripts::replies::{self, MAX_COALESCED};
use crate::limiter::breaker::{opened_block, Block, BreakerRules};
use crate::limiter::{Limits, RateLimit, Verdict};
use crate::store::{Checked, Counted, Now, Offence, Reply, Subject, CLIENT_KEYS};
use crate::syntax::FailPolicy;

/// A check of a request without a limit: admitted.
pub(super) fn admitted() -> Reply {
    Reply::Checked(Checked {
        verdict: Verdict {
            allowed: true,
            ..Default::default()
        },
        ..Checked::default()
    })
}

/// The client and limit a group of joined requests is about.
#[derive(Clone, Debug)]
pub(super) struct About {
    pub refusal: RefusalKey,
    key: Vec<u8>,
    limit: RateLimit,
    rules: BreakerRules,
    rising: bool,
}

/// The requests waiting for a client's check on its way.
pub(super) struct Group<W> {
    about: About,
    joiners: Vec<W>,
}

/// One request's check under one limit.
pub(super) struct OneCheck<W> {
    pub waiter: W,
    pub key: Vec<u8>,
    pub limit: RateLimit,
    pub rules: BreakerRules,
    pub offence: Offence,
    asked_ms: u64,
    /// Its local refusal's key (none without a zone).
    pub refusal: Option<RefusalKey>,
    /// It opened the group of its refusal's key (the requests that join
    /// it). (Not a copy of the key: measured, every move of a stacked
    /// check, whose list of places this shares, cost 48 bytes more.)
    pub group: bool,
    /// The slot whose checks gather behind it (`gather.rs`; none: an
    /// approximate counter's, gathered with the stacked checks,
    /// `stacks.rs`, or one sent alone beyond `MAX_HELD`).
    pub gate: Option<u16>,
    /// The client's slot (one Redis: 0), whose generation its answer
    /// notes.
    slot: u16,
}

/// One request's check of every limit in the stacked script, but its
/// waiter: made in a box the node gives back once it is decided, lists
/// and part in place (`spare.rs`; measured: its part made, moved and
/// copied into a box, its lists each taken and given back, and the
/// check moved whole with its stack, some 300 instructions a request).
/// Its rules and offence are its part's.
#[derive(Default)]
pub(super) struct StackedCheck {
    pub key: Vec<u8>,
    /// The limits it is counted by, keyed as the node keeps their
    /// refusals (none without a zone).
    pub limits: Vec<KeyedLimit>,
    asked_ms: u64,
    /// The client's slot (one Redis: 0), whose generation its answer
    /// notes.
    slot: u16,
    /// Its call's part.
    pub part: Part,
}

impl StackedCheck {
    /// Emptied for the next request (its lists keep their room).
    pub fn clear(&mut self) {
        self.key.clear();
        self.limits.clear();
    }
}

/// A request's check under the location's one `approx` limit, and its
/// call's part.
pub(super) struct ApproxCheck<W> {
    pub check: OneCheck<W>,
    pub part: Part,
}

/// One stacked check, about to be sent or on its way (`stacks.rs`): its
/// member and what its answer decides (with its call's part).
pub(super) struct Stack<W> {
    pub seq: u64,
    pub then: Then<W>,
}

/// What a stacked check's answer decides.
pub(super) enum Then<W> {
    /// A request's check, every limit in one call (its waiter, and the
    /// rest in a box: a stack small to move).
    Request(W, Box<StackedCheck>),
    /// One part of a request's check whose limits lie in several slots
    /// (kept with the request, `sharded.rs`: made in place there).
    Part { request: u64, index: usize },
    /// A request's check under the location's one `approx` limit.
    Approx(Box<ApproxCheck<W>>),
}

impl<W> Stack<W> {
    /// Its call's part: its own, or its request's, which `kept` finds
    /// (`sharded.rs`; none: its request is decided, nothing waits for it).
    pub fn part<'a>(
        &'a self,
        kept: impl FnOnce(u64, usize) -> Option<&'a Part>,
    ) -> Option<&'a Part> {
        match &self.then {
            Then::Request(_, c) => Some(&c.part),
            Then::Approx(c) => Some(&c.part),
            Then::Part { request, index } => kept(*request, *index),
        }
    }
}

/// Joined requests decided in one call.
pub(super) struct Together<W> {
    pub joiners: Vec<W>,
    pub group: About,
    asked_ms: u64,
}

impl<W: Waits> ClusterNode<W> {
    pub(super) fn check(
        &mut self,
        env: &mut impl Around,
        subject: &Subject,
        (offence, fail): (Offence, FailPolicy),
        now: Now,
        waiter: impl FnOnce() -> W,
        out: &mut Vec<Step<W>>,
    ) -> Answered {
        let rules = subject.rules;
        // (Inline: no allocation.)
        let tag = self.calls.tag(subject.key);
        // (The client's slot, made once: one Redis, 0.)
        let slot = self.gate_of(tag.as_bytes());
        let known = self.cluster.then_some(slot);
        let reach = env.reach(tag.as_bytes(), known);
        // A block this node learnt from Redis holds without asking again
        // (blocked requests change nothing there): blocking stays cheap.
        // (Looked for with the refusals, under one lock: measured, a lock
        // of the zone each.)
        let block = node_answers(Known::Block, reach, fail).then_some((subject.key, rules));
        // Stacked or keyed limits: all of them in one call, decided in
        // Redis, and refused here while a limit's key is refused (not
        // coalesced: `keyed.rs`).
        let Some(limit) = single_limit(subject) else {
            let mut c = self.spare.stacked();
            if env.has_zone() {
                self.keyed_limits_in(subject, &mut c.limits);
            }
            let refuse = offence == Offence::Unpaid && node_answers(Known::Refusal, reach, fail);
            let whose = (subject, slot);
            let looks = (&c.limits[..], refuse, block);
            if let Some(checked) = self.look_keyed(env, whose, looks, now, out) {
                self.spare.give_stacked(c);
                return Answered::Now(Reply::Checked(checked));
            }
            let seq = self.next_seq();
            // A Redis Cluster: the keys of a `key=` count lie in other
            // slots than the client's (`sharded.rs`), unless the client's
            // keys are known in its network's slot and the count is its
            // network's (`slot=net`): then all of them in one call, as
            // on one Redis.
            let in_slot = |(_, _, whose): (usize, RateLimit, Counted)| match whose {
                Counted::Own(value) => keys::in_client_slot(&tag, value),
                Counted::Client(_) | Counted::Spends(_) => true,
            };
            if self.cluster && subject.limits.any_keyed() && !subject.counted_iter().all(in_slot) {
                let waiter = waiter();
                let whose = (subject, tag, slot);
                let limits = std::mem::replace(&mut c.limits, self.spare.limits.take());
                self.spare.give_stacked(c);
                self.check_sharded(env, whose, (offence, limits, seq), now, waiter, out);
                return Answered::Later;
            }
            // With those of other requests of its slot on their way
            // (`stacks.rs`).
            c.key.extend_from_slice(subject.key);
            (c.asked_ms, c.slot) = (now.monotonic_ms, slot);
            self.calls
                .whole_in(&mut c.part, (tag, known), subject, offence);
            let stack = Stack {
                seq,
                then: Then::Request(waiter(), c),
            };
            self.stack(env, stack, now, out);
            return Answered::Later;
        };
        // Refused by Redis until a moment still ahead: refused here, unless
        // it pays (a spend must be global), or Redis's word is not to be
        // had now (`pow_shield_fail` decides).
        // (Its refusal's key, made once: none without a zone.)
        let refusal = env
            .has_zone()
            .then(|| refusal_key(self.scope, limit, subject.limits.approx(0), subject.key));
        // Else what this worker counted for the client goes first: Redis
        // decides this request on every strike (the one reaching the
        // threshold is Redis's to count).
        if let Some(refusal) = &refusal {
            let refuse = offence == Offence::Unpaid && node_answers(Known::Refusal, reach, fail);
            let whose = (subject, limit, refusal);
            if let Some(checked) = self.look_locally(env, whose, (slot, refuse, block), now, out) {
                return Answered::Now(Reply::Checked(checked));
            }
        }
        // A request of a client whose check is on its way joins it: the
        // call's answer decides it.
        let coalesce = offence == Offence::Unpaid && !subject.limits.approx(0);
        if let (Some(refusal), true) = (&refusal, coalesce) {
            if let Some(group) = self.groups.get_mut(refusal) {
                if group.about.rules == rules && group.about.rising == subject.rising {
                    group.joiners.push(waiter());
                    return Answered::Later;
                }
            }
        }
        // A group of this check's own, unless another check of the client
        // (other rules, another price) holds it: this one neither joins
        // nor releases it.
        let group = match refusal.as_ref().filter(|_| coalesce) {
            Some(group) if !self.groups.contains_key(group) => {
                let about = About {
                    refusal: group.clone(),
                    key: subject.key.to_vec(),
                    limit,
                    rules,
                    rising: subject.rising,
                };
                let joiners = Vec::new();
                self.groups.insert(group.clone(), Group { about, joiners });
                true
            }
            _ => false,
        };
        let check = OneCheck {
            waiter: waiter(),
            key: self.spare.key(subject.key),
            limit,
            rules,
            offence,
            asked_ms: now.monotonic_ms,
            refusal,
            group,
            gate: (!subject.limits.approx(0)).then_some(slot),
            slot,
        };
        // Approx: with the stacked checks of its slot (`stacks.rs`).
        if subject.limits.approx(0) {
            let part = Part::approx(tag.as_bytes(), limit, rules, offence).in_slot(known);
            let stack = Stack {
                seq: self.next_seq(),
                then: Then::Approx(Box::new(ApproxCheck { check, part })),
            };
            self.stack(env, stack, now, out);
            return Answered::Later;
        }
        // Exact: it waits behind a check of its slot on its way, and goes
        // with the others gathered there meanwhile (`gather.rs`).
        let Some(check) = self.gather(env, check, now, out) else {
            return Answered::Later;
        };
        let seq = self.next_seq();
        let call = self
            .calls
            .check_in((tag.as_bytes(), known), subject, offence, 1, seq);
        // (A Redis Cluster's slot known, one Redis: the router reads no
        // key, none is copied, `Step::Send`.)
        let route = (Vec::new(), known);
        self.send_script_in(env, Flight::Check(check), route, call, now, out);
        Answered::Later
    }

    /// The reply to one request's check.
    pub(super) fn checked(
        &mut self,
        env: &mut impl Around,
        c: OneCheck<W>,
        frame: Option<&Frame>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let gate = c.gate;
        self.check_answered(env, c, Answer::of(frame), now, out);
        // What gathered behind it goes now (or falls back with it).
        if let Some(slot) = gate {
            let fell = frame.is_none().then_some(Fell::down(false));
            self.gate_done(env, slot, fell, now, out);
        }
    }

    /// What one request's check was answered (as its own call or as one
    /// of a call of several clients' checks).
    pub(super) fn check_answered(
        &mut self,
        env: &mut impl Around,
        c: OneCheck<W>,
        answer: Answer,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let ran = answer.may_have_run();
        let limits = Limits::one(c.limit);
        let checked = ints(&answer)
            .and_then(|r| calls::checked(self.cluster, r, &limits, c.rules, c.offence));
        self.check_decided(env, c, checked.ok_or(Fell::down(ran)), now, out);
    }

    /// What one request's check under one limit was answered (`Err`: no
    /// answer, and how it failed).
    pub(super) fn check_decided(
        &mut self,
        env: &mut impl Around,
        c: OneCheck<W>,
        checked: Result<Checked, Fell>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let fell = match checked {
            Ok(checked) => {
                // The strike that opened the breaker: the next request is
                // blocked here, not refused once more.
                let keep = opened_block(&checked.breaker, c.rules).unwrap_or(checked.breaker);
                remember(env, &c.key, keep, c.rules, now);
                self.generations.note_slot(c.slot, checked.generation);
                if let Some(refusal) = &c.refusal {
                    match (checked.verdict.allowed, keep.block) {
                        (false, Block::Clear) => env.learn_refusal(
                            refusal,
                            &checked.verdict,
                            &checked.breaker,
                            c.asked_ms,
                        ),
                        (_, Block::Clear) => {}
                        // Once the block ends Redis decides again.
                        _ => env.forget_refusal(refusal, now.monotonic_ms),
                    }
                }
                out.push(Step::Deliver(c.waiter, Reply::Checked(checked)));
                None
            }
            Err(fell) => {
                out.push(Step::FallBack {
                    waiter: c.waiter,
                    failure: fell.failure,
                    sent: fell.sent,
                });
                Some(fell)
            }
        };
        // The requests that joined this one are decided once it has its
        // answer (the fallback's too, in arrival order).
        if let (true, Some(group)) = (c.group, &c.refusal) {
            self.release(env, group, now, fell, out);
        }
        self.spare.keys.give(c.key);
    }

    /// The answer to a stacked check `c` of the request `waiter` waits
    /// for.
    pub(super) fn stacked_checked(
        &mut self,
        env: &mut impl Around,
        (waiter, c): (W, &StackedCheck),
        answer: &Answer,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let ran = answer.may_have_run();
        let part = &c.part;
        let (kept, rules) = ((part, &part.at), part.rules);
        let checked = ints(answer)
            .and_then(|r| calls::stacked_checked(self.cluster, r, kept, rules, part.offence));
        match checked {
            Some(checked) => {
                remember(env, &c.key, checked.breaker, rules, now);
                // A Redis Cluster's refusal answers the client's slot's
                // generation (its next refusals are then the node's).
                self.generations.note_slot(c.slot, checked.generation);
                self.learn_keyed(env, (&c.limits, rules), &checked, c.asked_ms, now);
                out.push(Step::Deliver(waiter, Reply::Checked(checked)));
            }
            None => out.push(Step::FallBack {
                waiter,
                failure: Unavailable::Down,
                sent: ran,
            }),
        }
    }

    /// The check of `refusal` was answered (`fell`: `None`) or failed: the
    /// requests that joined it are decided, by what the answer left in the
    /// zone (a block, a refusal until `T`), or together in one more call;
    /// after a failure each is the fallback's, with the failure and
    /// whether Redis may have run the check they joined.
    pub(super) fn release(
        &mut self,
        env: &mut impl Around,
        refusal: &[u8],
        now: Now,
        fell: Option<Fell>,
        out: &mut Vec<Step<W>>,
    ) {
        let Some(group) = self.groups.remove(refusal) else {
            return;
        };
        let about = group.about;
        let mut rest = Vec::new();
        for waiter in group.joiners {
            // A request gone meanwhile is neither counted nor struck.
            if !waiter.waiting() {
                continue;
            }
            if let Some(Fell { failure, sent }) = fell {
                out.push(Step::FallBack {
                    waiter,
                    failure,
                    sent,
                });
            } else if let Some(breaker) = env.blocked(&about.key, about.rules, now.monotonic_ms) {
                let reply = Reply::Checked(Checked {
                    breaker,
                    ..Checked::default()
                });
                out.push(Step::Deliver(waiter, reply));
            } else if let Some(checked) = {
                let one = Limits::one(about.limit);
                let subject = about.subject(&one);
                let in_slot = self.calls.client_slot();
                let slot = || slot_of_tag(keys::client_tag_in(&about.key, in_slot).as_bytes());
                self.refuse_locally(env, &subject, (about.limit, slot), now, out)
            } {
                out.push(Step::Deliver(waiter, Reply::Checked(checked)));
            } else {
                rest.push(waiter);
            }
        }
        if rest.is_empty() {
            return;
        }
        // Later requests join these calls (sent in order on one
        // connection: each decides what the previous ones left).
        self.groups.insert(
            about.refusal.clone(),
            Group {
                about: about.clone(),
                joiners: Vec::new(),
            },
        );
        while !rest.is_empty() {
            let chunk: Vec<_> = rest.drain(..rest.len().min(MAX_COALESCED)).collect();
            self.check_together(env, &about, chunk, now, out);
        }
    }

    /// One call of the window script for the unpaid requests of one client
    /// in `joiners` (in arrival order).
    fn check_together(
        &mut self,
        env: &mut impl Around,
        about: &About,
        joiners: Vec<W>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        // What the node counted for the client goes first (the joiners
        // refused here just now among it): Redis decides on every strike.
        let one = Limits::one(about.limit);
        let subject = about.subject(&one);
        self.send_batch_now(env, &subject, now, out);
        let k = joiners.len() as u32;
        let tag = self.calls.tag(&about.key);
        let seq = self.next_seq();
        let call = self
            .calls
            .check(tag.as_bytes(), &subject, Offence::Unpaid, k, seq);
        let flight = Flight::Together(Together {
            joiners,
            group: about.clone(),
            asked_ms: now.monotonic_ms,
        });
        self.send_script(env, flight, tag.to_vec(), call, now, out);
    }

    /// The reply to joined requests' call.
    pub(super) fn together_checked(
        &mut self,
        env: &mut impl Around,
        t: Together<W>,
        frame: Option<&Frame>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let about = &t.group;
        let k = t.joiners.len() as u32;
        let answer = Answer::of(frame);
        let ran = answer.may_have_run();
        let reply = answer.integers().unwrap_or_default();
        // A Redis Cluster's refusal answers the slot's generation too.
        let (reply, generation) = replies::split_generation(&reply, self.cluster);
        let decided = replies::coalesced_from_reply(reply, about.limit, k).ok();
        let slot = slot_of_tag(self.calls.tag(&about.key).as_bytes());
        self.generations.note_slot(slot, generation);
        match decided {
            Some(c) => {
                let rules = about.rules;
                if c.breaker.block != Block::Clear {
                    remember(env, &about.key, c.breaker, rules, now);
                    env.forget_refusal(&about.refusal, now.monotonic_ms);
                } else if let Some(block) = opened_block(&c.breaker, rules) {
                    // The breaker opened in this call: the requests after
                    // it are blocked, and so are the next ones.
                    remember(env, &about.key, block, rules, now);
                    env.forget_refusal(&about.refusal, now.monotonic_ms);
                } else if c.admitted < k {
                    env.learn_refusal(&about.refusal, &c.verdict, &c.breaker, t.asked_ms);
                }
                for (i, waiter) in t.joiners.into_iter().enumerate() {
                    let checked = Checked {
                        generation,
                        ..c.nth(i as u32, k, rules)
                    };
                    out.push(Step::Deliver(waiter, Reply::Checked(checked)));
                }
            }
            None => out.extend(t.joiners.into_iter().map(|waiter| Step::FallBack {
                waiter,
                failure: Unavailable::Down,
                sent: ran,
            })),
        }
        let fell = decided.is_none().then_some(Fell::down(ran));
        self.release(env, &about.refusal, now, fell, out);
    }
}

/// The script's integers, if it ran, where they lie (measured: taken
/// out of the answer, a copy of 136 bytes).
pub(super) fn ints(answer: &Answer) -> Option<&Ints> {
    match answer {
        Answer::Ran(ints) => Some(ints),
        Answer::Expired | Answer::Lost => None,
    }
}

impl About {
    /// The subject of a group's requests: one client under one exact limit
    /// (`one`, made of it by the caller: the subject borrows it).
    fn subject<'a>(&'a self, one: &'a Limits) -> Subject<'a> {
        Subject {
            key: &self.key,
            limits: one,
            key_values: CLIENT_KEYS,
            rules: self.rules,
            rising: self.rising,
        }
    }
}

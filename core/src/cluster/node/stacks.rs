//! Several requests' stacked checks in one call, as `gather.rs` gathers
//! exact checks of one limit: a stacked check (every limit of a request;
//! a Redis Cluster's part of it in one slot, `sharded.rs`) or a check
//! under one `approx` limit goes at once unless one of its slot (one
//! Redis: any) is on its way; then it waits, with the others that come
//! meanwhile, and they go together in one call of the stacked script
//! (`Calls::stacks`; parts of one count without a breaker each, a Redis
//! Cluster's site or /24 parts: the counts script's, `Calls::counts`) as
//! soon as that call's reply comes (Nagle's rule). A lone check never
//! waits, and goes as its own call (a request's: the stacked script's; a
//! part or an approx check: the script `Part::alone` names).
//!
//! Parts of different requests in one slot gather (every address of a /24
//! has its /24's count in one slot, `key=site` is one slot); the script
//! checks the requests of a call one after another, each counted by all
//! its limits of the slot or by none (across slots, `sharded.rs`'s undo).
//!
//! Each stays its own: its deadline is the call's (a call that came too
//! late writes nothing for any), its reply is cut out of the call's and
//! read as its own call's would be (refusals per limit key kept on the
//! node, strikes, breaker, generation); a call that fails falls each back
//! under its own `pow_shield_fail`; those waiting behind a call that gets
//! no reply fall back at once, never sent. They count in `gather.rs`'s
//! `MAX_HELD` with the exact checks.

use crate::redis::command::Frame;

use super::check::{ApproxCheck, Stack, Then};
use super::gather::{Gatherings, MAX_HELD};
use super::sharded::{self, Sharded};
use super::{Around, ClusterNode, Fell, Flight, Ids, Step, Waits};
use crate::cluster::calls::{self, stacks_reply, Part, MAX_GATHERED};
use crate::cluster::fallback::{Answer, Unavailable};
use crate::store::Now;

/// `stack`'s part: its own, or its request's in `sharded`.
fn part_of<'a, W>(stack: &'a Stack<W>, sharded: &'a Ids<u64, Sharded<W>>) -> Option<&'a Part> {
    stack.part(|request, index| sharded::part_of(sharded, request, index))
}

/// Stacked checks of one slot gathered, or one alone.
pub(super) type Stacking<W> = Gatherings<Stack<W>>;

/// Stacked checks decided in one call.
pub(super) struct Stacks<W> {
    /// The slot whose gathering waits for its reply (none: sent alone
    /// beyond `MAX_HELD`).
    gate: Option<u16>,
    /// In a call of the gathered script (else alone, its own call).
    gathered: bool,
    stacks: OneOrMore<Stack<W>>,
}

/// A call's stacked checks: its one (alone: no list to make), or those
/// gathered in it.
pub(super) enum OneOrMore<T> {
    One(T),
    More(Vec<T>),
}

impl<T> OneOrMore<T> {
    fn len(&self) -> usize {
        match self {
            OneOrMore::One(_) => 1,
            OneOrMore::More(all) => all.len(),
        }
    }
}

impl<T> IntoIterator for OneOrMore<T> {
    type Item = T;
    type IntoIter = core::iter::Chain<core::option::IntoIter<T>, std::vec::IntoIter<T>>;

    fn into_iter(self) -> Self::IntoIter {
        let (one, more) = match self {
            OneOrMore::One(one) => (Some(one), Vec::new()),
            OneOrMore::More(more) => (None, more),
        };
        one.into_iter().chain(more)
    }
}

impl<W: Waits> ClusterNode<W> {
    /// Sends `stack` now, or gathers it behind a call of its slot on its
    /// way; a full gathering goes at once.
    pub(super) fn stack(
        &mut self,
        env: &mut impl Around,
        stack: Stack<W>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        // (Its part looked up once, and made into its call here if it goes
        // alone: measured, a second look-up of a request's part.)
        let Some(part) = part_of(&stack, &self.sharded) else {
            // (Its request decided already: nothing waits for it.)
            return;
        };
        let slot = match self.cluster {
            true => part.slot(),
            false => 0,
        };
        // Alone beyond `MAX_HELD` (no gate), or when no call of its slot is
        // on its way (the gate of those that gather behind it).
        let gate = if self.held >= MAX_HELD {
            None
        } else if self.stacking.goes_now(slot) {
            Some(slot)
        } else {
            self.held += 1;
            if let Some(queued) = self.stacking.gather_behind(slot, stack) {
                self.send_stacks(env, slot, queued, now, out);
            }
            return;
        };
        // A request's every limit by the stacked script; a part (or an
        // approx check) by the script `Part::alone` names.
        let call = match &stack.then {
            Then::Request(..) => self.calls.stacked(part, stack.seq),
            _ => self.calls.alone(part, stack.seq),
        };
        // (A Redis Cluster's slot; one Redis has none. Either way the
        // router reads no key: none is copied, `Step::Send`.)
        let route = (Vec::new(), self.cluster.then_some(slot));
        let flight = Flight::Stacks(Stacks {
            gate,
            gathered: false,
            stacks: OneOrMore::One(stack),
        });
        self.send_script_in(env, flight, route, call, now, out);
    }

    /// Sends `stacks` of `slot` in calls of the gathered script.
    fn send_stacks(
        &mut self,
        env: &mut impl Around,
        slot: u16,
        mut stacks: Vec<Stack<W>>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        while !stacks.is_empty() {
            let rest = stacks.split_off(stacks.len().min(MAX_GATHERED));
            let mut batch = std::mem::replace(&mut stacks, rest);
            let sharded = &self.sharded;
            // (A part whose request is decided already: nothing waits for
            // it.)
            let gathered = batch.len();
            batch.retain(|s| part_of(s, sharded).is_some());
            self.held = self.held.saturating_sub(gathered - batch.len());
            // Requests under the same limits, rules and offence in a row:
            // they share their arguments in the call.
            let same = |a: &Stack<W>, b: &Stack<W>| match (part_of(a, sharded), part_of(b, sharded))
            {
                (Some(a), Some(b)) => a.same_set(b),
                _ => false,
            };
            if !batch.windows(2).all(|w| same(&w[0], &w[1])) {
                batch.sort_by_cached_key(|s| part_of(s, sharded).map(Part::set));
            }
            let of: Vec<(&Part, u64)> = batch
                .iter()
                .filter_map(|s| Some((part_of(s, sharded)?, s.seq)))
                .collect();
            if of.is_empty() {
                continue;
            }
            // Parts of one count without a breaker each (the site's, a
            // /24's): the counts script's call; else the stacked script's.
            let call = match self.calls.counts(&of) {
                Some(call) => call,
                None => self.calls.stacks(&of),
            };
            self.stacking.sending(slot);
            let flight = Flight::Stacks(Stacks {
                gate: Some(slot),
                gathered: true,
                stacks: OneOrMore::More(batch),
            });
            // (A Redis Cluster's slot, whose router then reads no key; one
            // Redis gathers in slot 0, its router routes nothing: no route
            // copied, `Step::Send`.)
            let route = (Vec::new(), self.cluster.then_some(slot));
            self.send_script_in(env, flight, route, call, now, out);
        }
    }

    /// The reply to a call of stacked checks (`None`: none came).
    /// (Inline: the call's checks read where its flight lies, not copied
    /// out into an argument.)
    #[inline]
    pub(super) fn stacks_answered(
        &mut self,
        env: &mut impl Around,
        s: Stacks<W>,
        frame: Option<&Frame>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let n = s.stacks.len();
        if s.gathered {
            self.held = self.held.saturating_sub(n);
            let replies = match frame.and_then(Frame::bulk_string) {
                Some(text) => stacks_reply(text, n, self.cluster),
                _ => None,
            };
            let late = frame.is_some_and(|f| f.expired_ms().is_some());
            let answers: Vec<Answer> = match (replies, late) {
                (Some(replies), _) => replies.iter().map(|ints| Answer::ran(ints)).collect(),
                (None, true) => vec![Answer::Expired; n],
                (None, false) => vec![Answer::Lost; n],
            };
            for (stack, answer) in s.stacks.into_iter().zip(answers) {
                self.stack_answered(env, stack, answer, true, now, out);
            }
        } else {
            // (Alone: its one stack, handed on where it lies, not copied
            // out first.)
            let answer = Answer::of(frame);
            match s.stacks {
                OneOrMore::One(stack) => self.stack_answered(env, stack, answer, false, now, out),
                OneOrMore::More(all) => {
                    if let Some(stack) = all.into_iter().next() {
                        self.stack_answered(env, stack, answer, false, now, out);
                    }
                }
            }
        }
        // What gathered behind it goes now (or falls back with it).
        if let Some(slot) = s.gate {
            self.stacks_done(
                env,
                slot,
                frame.is_none().then_some(Fell::down(false)),
                now,
                out,
            );
        }
    }

    /// One stacked check's answer (`gathered`: cut out of a gathered
    /// call's, read as the stacked script's).
    fn stack_answered(
        &mut self,
        env: &mut impl Around,
        stack: Stack<W>,
        answer: Answer,
        gathered: bool,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        match stack.then {
            Then::Request(waiter, c) => {
                self.stacked_checked(env, (waiter, &c), &answer, now, out);
                self.spare.give_stacked(c);
            }
            Then::Part { request, index } => {
                let alone = !gathered;
                self.part_answered(env, (request, index), alone, answer, now, out)
            }
            Then::Approx(c) if gathered => {
                let ran = answer.may_have_run();
                let ApproxCheck { check, part } = *c;
                let checked = super::check::ints(&answer).and_then(|r| {
                    let (kept, rules, offence) = ((&part, &part.at), part.rules, part.offence);
                    calls::stacked_checked(self.cluster, r, kept, rules, offence)
                });
                self.check_decided(env, check, checked.ok_or(Fell::down(ran)), now, out);
            }
            Then::Approx(c) => self.check_answered(env, c.check, answer, now, out),
        }
    }

    /// A call of `slot`'s stacked checks ended (`fell`: without a reply):
    /// what gathered behind it goes now, or falls back never sent.
    fn stacks_done(
        &mut self,
        env: &mut impl Around,
        slot: u16,
        fell: Option<Fell>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let queued = self.stacking.done(slot);
        if queued.is_empty() {
            return;
        }
        match fell {
            None => self.send_stacks(env, slot, queued, now, out),
            Some(Fell { failure, .. }) => {
                self.held = self.held.saturating_sub(queued.len());
                self.stacks_never_sent(env, queued, failure, now, out);
            }
        }
    }

    /// A call of stacked checks the router did not take.
    pub(super) fn stacks_unsent(
        &mut self,
        env: &mut impl Around,
        s: Stacks<W>,
        failure: Unavailable,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        if s.gathered {
            self.held = self.held.saturating_sub(s.stacks.len());
        }
        self.stacks_never_sent(env, s.stacks, failure, now, out);
        if let Some(slot) = s.gate {
            let never_sent = Fell {
                failure,
                sent: false,
            };
            self.stacks_done(env, slot, Some(never_sent), now, out);
        }
    }

    /// `stacks` fall back, never sent, with `failure`.
    fn stacks_never_sent(
        &mut self,
        env: &mut impl Around,
        stacks: impl IntoIterator<Item = Stack<W>>,
        failure: Unavailable,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        for stack in stacks {
            match stack.then {
                Then::Request(waiter, _) => out.push(Step::FallBack {
                    waiter,
                    failure,
                    sent: false,
                }),
                Then::Part { request, index } => {
                    self.part_unsent(env, (request, index), failure, now, out)
                }
                Then::Approx(c) => {
                    let never_sent = Fell {
                        failure,
                        sent: false,
                    };
                    self.check_decided(env, c.check, Err(never_sent), now, out)
                }
            }
        }
    }
}

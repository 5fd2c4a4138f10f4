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
//! A Redis Cluster gathers per master where the slot table knows it
//! ([`MASTER_GATE`]): with keys over 16,384 slots a slot's gathering
//! seldom holds two parts, a master's holds every part of its slots that
//! came meanwhile. They go in one call of the master's script
//! (`Calls::node_stacks`), each slot's as its own gathered call would
//! have them and answered as it; a lone request's parts on one master go
//! at once in one call. A slot the master no longer serves (a stale table,
//! a slot migrating) answers `NOTLOCAL`, nothing run: it goes again in a
//! call of its own, which Redis redirects. A master's call that gets no
//! reply (a timeout: a master down or stalled, a slot whose migration
//! outlasts the timeout) falls back what gathered behind it, as a slot's
//! did.
//!
//! Each stays its own: its deadline is the call's (a call that came too
//! late writes nothing for any), its reply is cut out of the call's and
//! read as its own call's would be (refusals per limit key kept on the
//! node, strikes, breaker, generation); a call that fails falls each back
//! under its own `pow_shield_fail`; those waiting behind a call that gets
//! no reply fall back at once, never sent. They count in `gather.rs`'s
//! `MAX_HELD` with the exact checks.

use std::collections::HashMap;

use redis_protocol::resp2::types::OwnedFrame;

use super::check::{Stack, Then};
use super::gather::{done, join, sending, Gathering, Joined, MAX_HELD};
use super::{Around, ClusterNode, Fell, Flight, Step, Waits};
use crate::cluster::calls::{self, node_stacks_reply, stacks_reply, Part, SlotReply, MAX_GATHERED};
use crate::cluster::fallback::{Answer, Unavailable};
use crate::cluster::generation::slot_of_tag;
use crate::redis::clock;
use crate::store::Now;

/// Stacked checks of one slot (a Redis Cluster's master: from
/// [`MASTER_GATE`] on) gathered, or one alone.
pub(super) type Stacking<W> = HashMap<u16, Gathering<Stack<W>>>;

/// A Redis Cluster's stacked checks gather per master, when the slot
/// table knows it: master `i`'s gate is `MASTER_GATE + i` (slots are
/// below); they go in a master's call (`Calls::node_stacks`), each slot's
/// as its own gathered call would have them.
pub(super) const MASTER_GATE: u16 = 16_384;

/// Stacked checks decided in one call.
pub(super) struct Stacks<W> {
    /// The slot whose gathering waits for its reply (none: sent alone
    /// beyond `MAX_HELD`).
    gate: Option<u16>,
    /// In a call of the gathered script (else alone, its own call).
    gathered: bool,
    stacks: Vec<Stack<W>>,
    /// A master's call: how many of `stacks` each of its slots holds, in
    /// order (else empty).
    slots: Vec<usize>,
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
        if self.held >= MAX_HELD {
            return self.send_stack(env, None, stack, now, out);
        }
        let gate = self.stack_gate(env, &stack.part.route);
        match join(&mut self.stacking, gate, stack) {
            Joined::Now(stack) => self.send_stack(env, Some(gate), stack, now, out),
            Joined::Waits => self.held += 1,
            Joined::Full(queued) => {
                self.held += 1;
                self.send_stacks(env, gate, queued, now, out);
            }
        }
    }

    /// A request's parts (`sharded.rs`), each as [`Self::stack`] sends
    /// it, but those of one master whose gathering has nothing on its way
    /// go now in one call: a lone request never waits behind itself.
    pub(super) fn stack_parts(
        &mut self,
        env: &mut impl Around,
        stacks: Vec<Stack<W>>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let mut going: Vec<(u16, Vec<Stack<W>>)> = Vec::new();
        for stack in stacks {
            if self.held >= MAX_HELD {
                self.send_stack(env, None, stack, now, out);
                continue;
            }
            let gate = self.stack_gate(env, &stack.part.route);
            if let Some((_, batch)) = going.iter_mut().find(|(g, _)| *g == gate) {
                batch.push(stack);
                continue;
            }
            match join(&mut self.stacking, gate, stack) {
                Joined::Now(stack) => going.push((gate, vec![stack])),
                Joined::Waits => self.held += 1,
                Joined::Full(queued) => {
                    self.held += 1;
                    self.send_stacks(env, gate, queued, now, out);
                }
            }
        }
        for (gate, mut batch) in going {
            match (batch.len(), batch.pop()) {
                (1, Some(stack)) => self.send_stack(env, Some(gate), stack, now, out),
                (_, Some(last)) => {
                    batch.push(last);
                    // (Joined: the gate counts one call on its way, which
                    // `send_stacks` counts again; nothing gathered behind
                    // it yet, else it would go with them.)
                    let queued = done(&mut self.stacking, gate, false);
                    self.held = self.held.saturating_sub(queued.len());
                    batch.extend(queued);
                    self.held += batch.len();
                    self.send_stacks(env, gate, batch, now, out);
                }
                (_, None) => {}
            }
        }
    }

    /// The gathering a stacked check routed by `route` joins: its master's
    /// ([`MASTER_GATE`]) where the slot table knows it, else its slot's.
    fn stack_gate(&self, env: &impl Around, route: &[u8]) -> u16 {
        let master = match self.cluster {
            true => env.master_of(route),
            false => None,
        };
        master
            .and_then(|m| u16::try_from(m).ok())
            .and_then(|m| MASTER_GATE.checked_add(m))
            .unwrap_or_else(|| self.gate_of(route))
    }

    /// One stacked check in its own call.
    fn send_stack(
        &mut self,
        env: &mut impl Around,
        gate: Option<u16>,
        stack: Stack<W>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        // A request's every limit by the stacked script; a part (or an
        // approx check) by the script `Part::alone` names.
        let call = match &stack.then {
            Then::Request(_) => self.calls.stacked(&stack.part, stack.seq),
            _ => self.calls.alone(&stack.part, stack.seq),
        };
        let route = stack.part.route.clone();
        let flight = Flight::Stacks(Stacks {
            gate,
            gathered: false,
            stacks: vec![stack],
            slots: Vec::new(),
        });
        self.send_script(env, flight, route, call, now, out);
    }

    /// Sends `stacks` of gathering `gate` in calls of the gathered script
    /// (a master's: `send_master_stacks`).
    fn send_stacks(
        &mut self,
        env: &mut impl Around,
        gate: u16,
        mut stacks: Vec<Stack<W>>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        if gate >= MASTER_GATE {
            return self.send_master_stacks(env, gate, stacks, now, out);
        }
        while !stacks.is_empty() {
            let rest = stacks.split_off(stacks.len().min(MAX_GATHERED));
            let batch = std::mem::replace(&mut stacks, rest);
            self.send_slot_stacks(env, Some(gate), batch, now, out);
        }
    }

    /// One slot's `batch` (at most [`MAX_GATHERED`]) in one gathered call,
    /// counted in gathering `gate` if any.
    fn send_slot_stacks(
        &mut self,
        env: &mut impl Around,
        gate: Option<u16>,
        mut batch: Vec<Stack<W>>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        sort_sets(&mut batch);
        let Some(route) = batch.first().map(|s| s.part.route.clone()) else {
            return;
        };
        let of: Vec<(&Part, u64)> = batch.iter().map(|s| (&*s.part, s.seq)).collect();
        // Parts of one count without a breaker each (the site's, a
        // /24's): the counts script's call; else the stacked script's.
        let call = match self.calls.counts(&of) {
            Some(call) => call,
            None => self.calls.stacks(&of),
        };
        if let Some(gate) = gate {
            sending(&mut self.stacking, gate);
        }
        let flight = Flight::Stacks(Stacks {
            gate,
            gathered: true,
            stacks: batch,
            slots: Vec::new(),
        });
        self.send_script(env, flight, route, call, now, out);
    }

    /// A master's gathered `stacks`: by slot, at most [`MAX_GATHERED`] in
    /// a master's call (one slot's alone: that slot's call), routed by
    /// the first slot's (its master, as the table said when they joined;
    /// a slot it no longer serves answers `NOTLOCAL` and goes again).
    fn send_master_stacks(
        &mut self,
        env: &mut impl Around,
        gate: u16,
        stacks: Vec<Stack<W>>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let mut by_slot: Vec<(u16, Stack<W>)> = stacks
            .into_iter()
            .map(|s| (slot_of_tag(&s.part.route), s))
            .collect();
        // (Stable: a slot's keep the order they came in.)
        by_slot.sort_by_key(|(slot, _)| *slot);
        while !by_slot.is_empty() {
            let rest = by_slot.split_off(by_slot.len().min(MAX_GATHERED));
            let mut slots: Vec<Vec<Stack<W>>> = Vec::new();
            let mut last = None;
            for (slot, stack) in std::mem::replace(&mut by_slot, rest) {
                match slots.last_mut() {
                    Some(same) if last == Some(slot) => same.push(stack),
                    _ => slots.push(vec![stack]),
                }
                last = Some(slot);
            }
            if slots.len() == 1 {
                for one in slots {
                    self.send_slot_stacks(env, Some(gate), one, now, out);
                }
                continue;
            }
            slots.iter_mut().for_each(|s| sort_sets(s));
            let of: Vec<Vec<(&Part, u64)>> = slots
                .iter()
                .map(|s| s.iter().map(|s| (&*s.part, s.seq)).collect())
                .collect();
            let each: Vec<&[(&Part, u64)]> = of.iter().map(Vec::as_slice).collect();
            let (Some(call), Some(route)) = (
                self.calls.node_stacks(&each),
                slots
                    .first()
                    .and_then(|s| s.first())
                    .map(|s| s.part.route.clone()),
            ) else {
                // (One Redis has no masters' gates.)
                for one in slots {
                    self.send_slot_stacks(env, Some(gate), one, now, out);
                }
                continue;
            };
            sending(&mut self.stacking, gate);
            let sizes = slots.iter().map(Vec::len).collect();
            let flight = Flight::Stacks(Stacks {
                gate: Some(gate),
                gathered: true,
                stacks: slots.into_iter().flatten().collect(),
                slots: sizes,
            });
            self.send_script(env, flight, route, call, now, out);
        }
    }

    /// The reply to a call of stacked checks (`None`: none came).
    pub(super) fn stacks_answered(
        &mut self,
        env: &mut impl Around,
        s: Stacks<W>,
        frame: Option<&OwnedFrame>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let n = s.stacks.len();
        if s.gathered {
            self.held = self.held.saturating_sub(n);
        }
        let slots = match s.slots.is_empty() {
            true => None,
            false => frame.and_then(|f| node_stacks_reply(f, s.slots.len())),
        };
        match (slots, s.gathered) {
            // A master's call: each slot's answer as its own call's, or
            // again in a call of its own (a slot the master does not serve:
            // nothing ran).
            (Some(replies), _) => {
                let mut stacks = s.stacks.into_iter();
                for (&size, reply) in s.slots.iter().zip(replies) {
                    let slot: Vec<Stack<W>> = stacks.by_ref().take(size).collect();
                    match reply {
                        SlotReply::NotLocal => {
                            self.held += slot.len();
                            self.send_slot_stacks(env, None, slot, now, out);
                        }
                        SlotReply::Ran(frame) => {
                            let answers = gathered(Some(frame), size, self.cluster);
                            for (stack, answer) in slot.into_iter().zip(answers) {
                                self.stack_answered(env, stack, answer, true, now, out);
                            }
                        }
                    }
                }
            }
            (None, gathered_call) => {
                let answers = match gathered_call {
                    false => vec![Answer::of(frame)],
                    true => gathered(frame, n, self.cluster),
                };
                for (stack, answer) in s.stacks.into_iter().zip(answers) {
                    self.stack_answered(env, stack, answer, gathered_call, now, out);
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
        let part = stack.part;
        match stack.then {
            Then::Request(c) => self.stacked_checked(env, c, &part, answer, now, out),
            Then::Part { request, index } => {
                let alone = !gathered;
                self.part_answered(env, (request, index), (part, alone), answer, now, out)
            }
            Then::Approx(c) if gathered => {
                let ran = answer.may_have_run();
                let checked = answer.integers().and_then(|r| {
                    let (kept, rules, offence) =
                        ((&part.limits, &part.at), part.rules, part.offence);
                    calls::stacked_checked(self.cluster, &r, kept, rules, offence)
                });
                self.check_decided(env, c, checked.ok_or(Fell::down(ran)), now, out);
            }
            Then::Approx(c) => self.check_answered(env, c, answer, now, out),
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
        let queued = done(&mut self.stacking, slot, fell.is_some());
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
        stacks: Vec<Stack<W>>,
        failure: Unavailable,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        for stack in stacks {
            match stack.then {
                Then::Request(c) => out.push(Step::FallBack {
                    waiter: c.waiter,
                    failure,
                    sent: false,
                }),
                Then::Part { request, index } => {
                    self.part_unsent(env, (request, index), stack.part, failure, now, out)
                }
                Then::Approx(c) => {
                    let never_sent = Fell {
                        failure,
                        sent: false,
                    };
                    self.check_decided(env, c, Err(never_sent), now, out)
                }
            }
        }
    }
}

/// `batch`'s requests under the same limits, rules and offence in a row:
/// they share their arguments in a gathered call.
fn sort_sets<W>(batch: &mut [Stack<W>]) {
    if !batch.windows(2).all(|w| w[0].part.same_set(&w[1].part)) {
        batch.sort_by_cached_key(|s| s.part.set());
    }
}

/// Each of the `n` requests' answer in a gathered call's reply (a slot's
/// in a master's call).
fn gathered(frame: Option<&OwnedFrame>, n: usize, cluster: bool) -> Vec<Answer> {
    let replies = match frame {
        Some(OwnedFrame::BulkString(text)) => stacks_reply(text, n, cluster),
        _ => None,
    };
    let late = frame.is_some_and(|f| clock::expired_ms(f).is_some());
    match (replies, late) {
        (Some(replies), _) => replies.into_iter().map(Answer::Ran).collect(),
        (None, true) => vec![Answer::Expired; n],
        (None, false) => vec![Answer::Lost; n],
    }
}

//! Several clients' checks in one call: a request's exact check goes at
//! once unless a check of its slot (one Redis: any) is on its way; then it
//! waits, with the others that come meanwhile, and they go together in one
//! call of the checks script (`Calls::checks`) as soon as that check's
//! reply comes (Nagle's rule). A lone check never waits; under load the
//! fixed cost of a script call (the call into Lua, its arguments, the
//! reply, Redis's clock) is paid once for up to [`MAX_GATHERED`] clients.
//!
//! Each gathered check stays its own: its deadline is the call's (a call
//! that came too late writes nothing for any), its reply is cut out of the
//! call's and read as the window script's (breaker, refusal kept on the
//! node, the group that joined it); a call that fails falls each back. If
//! the check they wait behind gets no reply (a timeout, a dropped
//! connection, a call the router refused), they fall back at once, never
//! sent.
//!
//! A Redis Cluster gathers per slot: the keys of one call share a slot (so
//! clients with keys in many slots, the usual case, seldom gather there).
//!
//! At most [`MAX_HELD`] checks wait gathered or in gathered calls; beyond,
//! a check goes alone, so that a stalled Redis still meets the router's
//! cap on commands in flight (`MAX_IN_FLIGHT`, 1024) and the requests
//! beyond it are decided at once: a stall holds at most 1024 - 4 + 64
//! requests of a worker.

use super::check::OneCheck;
use super::{Around, ClusterNode, Fell, Flight, Ids, Step, Waits};
use crate::cluster::calls::{checks_reply, CheckOf, MAX_GATHERED};
use crate::cluster::fallback::{Answer, Unavailable};
use crate::cluster::generation::slot_of_tag;
use crate::redis::command::{Frame, Tag};
use crate::store::Now;

/// Most checks held gathered, or in gathered calls on their way (four
/// full calls).
pub const MAX_HELD: usize = 4 * MAX_GATHERED;

/// The calls on their way per slot and what gathered behind them
/// (checks, or stacked checks: `stacks.rs`).
pub(super) struct Gatherings<T> {
    /// Calls on their way, by slot (grown to the highest slot met: at most
    /// a Redis Cluster's 16,384 counts, one Redis's one). Measured: a
    /// map's entry made and removed for each lone call cost 150-odd
    /// instructions a request.
    in_flight: Vec<u32>,
    /// What waits behind them, by slot (only slots where something does).
    queued: Ids<u16, Vec<T>>,
}

impl<T> Default for Gatherings<T> {
    fn default() -> Self {
        Gatherings {
            in_flight: Vec::new(),
            queued: Ids::default(),
        }
    }
}

impl<T> Gatherings<T> {
    /// `slot`'s count of calls on their way, the list grown to hold it.
    #[inline]
    fn in_flight(&mut self, slot: u16) -> Option<&mut u32> {
        let at = usize::from(slot);
        if self.in_flight.len() <= at {
            self.in_flight.resize(at + 1, 0);
        }
        self.in_flight.get_mut(at)
    }

    /// Whether something of `slot` about to be sent goes now: nothing of
    /// its slot is on its way (its call is, from now). Else it is to be
    /// gathered ([`Self::gather_behind`]). Asked before the item moves
    /// anywhere (measured: an item handed in and back out was copied
    /// twice, 200-odd bytes).
    #[inline]
    pub fn goes_now(&mut self, slot: u16) -> bool {
        match self.in_flight(slot) {
            Some(n) if *n > 0 => false,
            Some(n) => {
                *n = 1;
                true
            }
            // (Never: the list holds every slot.)
            None => true,
        }
    }

    /// `item` waits behind a call of `slot` on its way ([`Self::goes_now`]
    /// said not now); the gathering, once full, to go at once with it.
    pub fn gather_behind(&mut self, slot: u16, item: T) -> Option<Vec<T>> {
        let queued = self.queued.entry(slot).or_default();
        queued.push(item);
        if queued.len() < MAX_GATHERED {
            return None;
        }
        self.queued.remove(&slot)
    }

    /// A call of `slot` is sent (gathered).
    pub fn sending(&mut self, slot: u16) {
        if let Some(n) = self.in_flight(slot) {
            *n = n.saturating_add(1);
        }
    }

    /// A call of `slot` had its reply (or none): what gathered behind it,
    /// to send now, or to fall back never sent.
    #[inline]
    pub fn done(&mut self, slot: u16) -> Vec<T> {
        if let Some(n) = self.in_flight(slot) {
            *n = n.saturating_sub(1);
        }
        // (Nothing gathered anywhere: no slot to look up.)
        if self.queued.is_empty() {
            return Vec::new();
        }
        self.queued.remove(&slot).unwrap_or_default()
    }
}

/// Checks of several clients decided in one call.
pub(super) struct Checks<W> {
    slot: u16,
    checks: Vec<OneCheck<W>>,
}

impl<W: Waits> ClusterNode<W> {
    /// The slot whose checks a check of client tag `tag` gathers with.
    pub(super) fn gate_of(&self, tag: &[u8]) -> u16 {
        match self.cluster {
            true => slot_of_tag(tag),
            false => 0,
        }
    }

    /// A check about to be sent: back to send now (nothing of its slot on
    /// its way, or not gathered), or kept to go with the others later
    /// (`None`); a full gathering goes at once.
    pub(super) fn gather(
        &mut self,
        env: &mut impl Around,
        check: OneCheck<W>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) -> Option<OneCheck<W>> {
        let Some(slot) = check.gate else {
            return Some(check);
        };
        if self.held >= MAX_HELD {
            let mut check = check;
            check.gate = None;
            return Some(check);
        }
        if self.gathering.goes_now(slot) {
            return Some(check);
        }
        self.held += 1;
        if let Some(queued) = self.gathering.gather_behind(slot, check) {
            self.send_checks(env, slot, queued, now, out);
        }
        None
    }

    /// A check of `slot` had its reply (`fell`: `None`) or none: what
    /// gathered behind it goes now, or falls back with its failure, never
    /// sent (their joiners too).
    pub(super) fn gate_done(
        &mut self,
        env: &mut impl Around,
        slot: u16,
        fell: Option<Fell>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let queued = self.gathering.done(slot);
        if queued.is_empty() {
            return;
        }
        match fell {
            None => self.send_checks(env, slot, queued, now, out),
            Some(Fell { failure, .. }) => self.never_sent(env, queued, failure, now, out),
        }
    }

    /// `checks` fall back, never sent, with `failure` (and the requests
    /// that joined them).
    fn never_sent(
        &mut self,
        env: &mut impl Around,
        checks: Vec<OneCheck<W>>,
        failure: Unavailable,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        self.held = self.held.saturating_sub(checks.len());
        let never_sent = Fell {
            failure,
            sent: false,
        };
        for check in checks {
            out.push(Step::FallBack {
                waiter: check.waiter,
                failure,
                sent: false,
            });
            if let (true, Some(group)) = (check.group, &check.refusal) {
                self.release(env, group, now, Some(never_sent), out);
            }
        }
    }

    /// Sends `checks` of `slot` in calls of the checks script.
    fn send_checks(
        &mut self,
        env: &mut impl Around,
        slot: u16,
        mut checks: Vec<OneCheck<W>>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        while !checks.is_empty() {
            let rest = checks.split_off(checks.len().min(MAX_GATHERED));
            let mut batch = std::mem::replace(&mut checks, rest);
            // Clients under the same limit, rules and offence in a row:
            // they share their arguments in the call.
            batch.sort_by_key(|c| set_of(c));
            let tags: Vec<Tag> = batch.iter().map(|c| self.calls.tag(&c.key)).collect();
            let Some(route) = tags.first().map(|t| t.to_vec()) else {
                break;
            };
            let of: Vec<CheckOf> = batch
                .iter()
                .zip(&tags)
                .map(|(c, tag)| CheckOf {
                    tag: tag.as_bytes(),
                    limit: c.limit,
                    rules: c.rules,
                    offence: c.offence,
                })
                .collect();
            let seq = self.next_seq();
            let call = self.calls.checks(&of, seq);
            let flight = Flight::Checks(Checks {
                slot,
                checks: batch,
            });
            self.gathering.sending(slot);
            self.send_script(env, flight, route, call, now, out);
        }
    }

    /// The reply to a call of several clients' checks.
    pub(super) fn checks_answered(
        &mut self,
        env: &mut impl Around,
        c: Checks<W>,
        frame: Option<&Frame>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        self.held = self.held.saturating_sub(c.checks.len());
        let limits: Vec<_> = c.checks.iter().map(|c| c.limit).collect();
        let replies = match frame.and_then(Frame::bulk_string) {
            Some(text) => checks_reply(text, &limits, self.cluster),
            _ => None,
        };
        let late = frame.is_some_and(|f| f.expired_ms().is_some());
        let mut replies = replies.map(Vec::into_iter);
        for check in c.checks {
            let answer = match replies.as_mut().and_then(Iterator::next) {
                Some(ints) => Answer::ran(&ints),
                None if late => Answer::Expired,
                None => Answer::Lost,
            };
            self.check_answered(env, check, answer, now, out);
        }
        let fell = frame.is_none().then_some(Fell::down(false));
        self.gate_done(env, c.slot, fell, now, out);
    }

    /// A call of several clients' checks the router did not take.
    pub(super) fn checks_unsent(
        &mut self,
        env: &mut impl Around,
        c: Checks<W>,
        failure: Unavailable,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        self.never_sent(env, c.checks, failure, now, out);
        let never_sent = Fell {
            failure,
            sent: false,
        };
        self.gate_done(env, c.slot, Some(never_sent), now, out);
    }
}

/// What orders a call's checks into sets (`Calls::checks`).
fn set_of<W>(c: &OneCheck<W>) -> (u32, u64, [u64; 4], u64) {
    let offence = crate::cluster::scripts::args::offence(c.offence);
    let rules = crate::cluster::scripts::args::rules(c.rules);
    (c.limit.requests, c.limit.window_ms, rules, offence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_of_a_slot_goes_now_the_next_gather_until_a_full_call() {
        let mut map: Gatherings<usize> = Gatherings::default();
        // (item, its slot, goes now, a full gathering after it)
        let mut table = vec![(0, 7, true, None), (1, 9, true, None)];
        for i in 2..2 + MAX_GATHERED {
            let full = (i == 1 + MAX_GATHERED).then(|| (2..2 + MAX_GATHERED).collect());
            table.push((i, 7, false, full));
        }
        table.push((99, 7, false, None));
        table.push((100, 16_383, true, None));
        table.push((101, 16_383, false, None));
        for (item, slot, now, full) in table {
            assert_eq!(map.goes_now(slot), now, "{item}");
            if !now {
                assert_eq!(map.gather_behind(slot, item), full, "{item}");
            }
        }
        // Sent, the slot's one call: what gathered since goes after it.
        assert_eq!(map.done(7), vec![99]);
        assert_eq!(map.done(9), Vec::<usize>::new());
        assert!(map.goes_now(9));
        // Sent behind it, and one more gathered call: two on their way.
        map.sending(7);
        map.sending(7);
        assert_eq!(map.done(7), Vec::<usize>::new());
        assert!(!map.goes_now(7));
        assert_eq!(map.done(7), Vec::<usize>::new());
        assert!(map.goes_now(7));
        assert_eq!(map.done(16_383), vec![101]);
        assert!(map.goes_now(16_383));
    }
}

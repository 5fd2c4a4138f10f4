//! A Redis Cluster's check of stacked limits whose counts lie in several
//! slots: its parts, one per slot (`cluster::node`'s `sharded.rs` sends
//! them and decides the request), and what takes back a part's counts
//! when another part refuses.

use super::{own_tag, Call, Calls, Part, ScriptCall, NO_RULES};
use crate::cluster::generation;
use crate::cluster::keys;
use crate::cluster::scripts::args;
use crate::limiter::RateLimit;
use crate::redis::command::Tag;
use crate::store::{Counted, Offence, Subject};

impl Calls {
    /// A Redis Cluster's check of stacked limits whose counts lie in
    /// several slots: one stacked call per slot, the client's first (its
    /// breaker, its own limits, and any `key=` count in its slot; strikes
    /// only there), then one per other slot (no breaker: a `key=` limit's
    /// refusal strikes no one). Each counts the request under its limits
    /// if all of them have room; the request is admitted when every call
    /// admits, and what the others counted is taken back ([`Calls::undo`])
    /// when one refuses.
    pub fn parts(&self, tag: &[u8], subject: &Subject, offence: Offence) -> Vec<Part> {
        let mut parts = Vec::new();
        self.parts_in((Tag::from(tag), None), subject, offence, &mut parts);
        parts
    }

    /// [`Calls::parts`], each made in place in what `parts` keeps it in,
    /// the client's tag given as the route of its part (no copy), with its
    /// slot where known already (`Some`) (measured: the node's request
    /// kept its parts each in a box in a list of their own, three
    /// allocations).
    pub fn parts_in<T>(
        &self,
        (tag, slot): (Tag, Option<u16>),
        subject: &Subject,
        offence: Offence,
        parts: &mut Vec<T>,
    ) where
        T: From<Part> + AsRef<Part> + AsMut<Part>,
    {
        // (The counted limits one at a time: `Subject::counted_limits`'s
        // list of eight was filled and copied, `keyed_limits`.)
        let counted = subject.counted_iter();
        let client_slot = slot.unwrap_or_else(|| generation::slot_of_tag(&tag));
        let client = (tag, Some(client_slot), subject.rules, offence);
        let first = parts.len();
        // (At most the client's and one per `key=` count: room for no more,
        // measured, a larger list costs its allocation more.)
        let own = |(_, _, whose): &(usize, RateLimit, Counted)| matches!(whose, Counted::Own(_));
        parts.reserve_exact(1 + subject.counted_iter().filter(own).count());
        parts.push(T::from(Part::empty(client)));
        for (at, limit, whose) in counted {
            // Each count's tag and slot made once (a client's count: the
            // client's tag and slot, its part the first).
            let (index, tag) = match whose {
                Counted::Client(_) | Counted::Spends(_) => (first, None),
                Counted::Own(value) => {
                    let own = own_tag(value);
                    let slot = generation::slot_of_tag(&own);
                    let of_slot = parts
                        .iter()
                        .skip(first)
                        .position(|p| p.as_ref().slot == Some(slot));
                    match of_slot {
                        Some(index) => (first + index, Some(own)),
                        None => {
                            // The others strike no one (no rules); the
                            // request's offence still says whether the next
                            // challenge is priced from a count that has room
                            // (a paid request's).
                            let route = (own, Some(slot), NO_RULES, offence);
                            parts.push(T::from(Part::empty(route)));
                            (parts.len() - 1, None)
                        }
                    }
                }
            };
            if let Some(part) = parts.get_mut(index) {
                part.as_mut().count_tagged(subject, (at, limit, whose), tag);
            }
        }
    }

    /// [`Calls::parts`], each with its stacked call.
    pub fn stacked_parts(
        &self,
        tag: &[u8],
        subject: &Subject,
        offence: Offence,
        seq: u64,
    ) -> Vec<(Part, Call)> {
        let parts = self.parts(tag, subject, offence);
        parts
            .into_iter()
            .map(|part| {
                let call = self.stacked(&part, seq);
                (part, call)
            })
            .collect()
    }

    /// Takes back what a part of a request's check counted (`seq`: the
    /// request's, its member), in that part's slot.
    pub fn undo(&self, part: &Part, seq: u64) -> Option<Call> {
        let script = self.scripts.undo.as_ref()?;
        let prefix = self.prefix.as_bytes();
        let n = part.counts.len();
        let mut call = ScriptCall::new(&script.sha1, n, 3 + n);
        for c in part.counts.iter() {
            call.push(|w| keys::write(w, prefix, part.tag(c), c.key()));
        }
        call.push(|w| self.member(w, seq))
            .push(|w| args::write_approx(w, part.counts.iter().map(|c| c.approx)));
        for c in part.counts.iter() {
            call.num(c.limit.window_ms);
        }
        call.deadline();
        Some(Call::of(script, call))
    }
}

//! A Redis Cluster master's one call of several slots' gathered stacked
//! checks (`PartScripts::node`): the node gathers the parts of every slot
//! one master serves (its slot table says which), and sends each slot's
//! as its own gathered call of the stacked script would have them
//! ([`Calls::stacks`]), one after another in one call, their keys in
//! `ARGV` (Redis Cluster refuses declared keys of several slots in one
//! call). The call's fixed cost (the call into Lua, Redis's clock, the
//! reply, a syscall and a reply frame in the module) is paid once a master
//! rather than once a slot: with keys spread over 16,384 slots, a slot's
//! gathering seldom holds more than one part.
//!
//! A slot the master no longer serves (a stale table, a slot migrating
//! away, one imported) runs nothing and answers `NOTLOCAL`
//! ([`SlotReply::NotLocal`]): the node sends it again in a call of its own,
//! which Redis redirects as any call. Each other slot's answer is read as
//! its own gathered call's.

use redis_protocol::resp2::types::OwnedFrame;

use super::{Call, Calls, Part, ScriptCall, MAX_GATHERED};
use crate::redis::command::MAX_ELEMENTS;

/// Most slots in one master's call: one element of its reply each.
pub const MAX_SLOTS: usize = if MAX_GATHERED < MAX_ELEMENTS {
    MAX_GATHERED
} else {
    MAX_ELEMENTS
};

/// What a master's call answered for one of its slots.
#[derive(Debug, PartialEq, Eq)]
pub enum SlotReply<'a> {
    /// The slot ran: its reply, as its own gathered call's would be.
    Ran(&'a OwnedFrame),
    /// The master does not serve the slot: nothing ran, nothing written.
    NotLocal,
}

impl Calls {
    /// One call of each of `slots`' gathered stacked checks (each slot's
    /// parts in one slot, as [`Calls::stacks`] takes them; at most
    /// [`MAX_SLOTS`] slots and [`MAX_GATHERED`] parts in all), to the
    /// master serving them; `None` on one Redis (no such script).
    pub fn node_stacks(&self, slots: &[&[(&Part, u64)]]) -> Option<Call> {
        let script = &self.scripts.parts.as_ref()?.node;
        let lens: Vec<(usize, usize)> = slots.iter().map(|s| self.stacks_len(s)).collect();
        let argc = 1 + lens.iter().map(|(k, a)| 2 + k + a).sum::<usize>() + 1;
        let mut call = ScriptCall::new(&script.sha1, 0, argc);
        call.num(slots.len() as u64);
        for (parts, &(keys, args)) in slots.iter().zip(&lens) {
            call.num(keys as u64);
            self.stacks_keys(&mut call, parts);
            call.num(args as u64);
            self.stacks_args(&mut call, parts);
        }
        call.deadline();
        Some(Call::of(script, call))
    }
}

/// Each slot's part of a master's call's reply (`slots` of them, in the
/// order sent); `None` for anything else (an error: the call failed).
pub fn node_stacks_reply(frame: &OwnedFrame, slots: usize) -> Option<Vec<SlotReply<'_>>> {
    let OwnedFrame::Array(items) = frame else {
        return None;
    };
    if items.len() != slots {
        return None;
    }
    Some(items.iter().map(slot_reply).collect())
}

fn slot_reply(item: &OwnedFrame) -> SlotReply<'_> {
    match item {
        OwnedFrame::SimpleString(s) if s.as_slice() == b"NOTLOCAL" => SlotReply::NotLocal,
        other => SlotReply::Ran(other),
    }
}

#[cfg(test)]
mod tests;

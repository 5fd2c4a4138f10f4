//! A stacked call's arguments after its member.

use super::Part;
use crate::cluster::scripts::args;
use crate::redis::script_call::ScriptCall;

/// How many words [`part_args`] writes.
pub(super) fn part_words(part: &Part) -> usize {
    7 + 2 * part.counts.len()
}

/// A part's arguments after its member: what a refusal is, the breaker
/// rules, approx and own, each limit's numbers (made once for the same
/// limits: [`Texts`](super::Texts)).
pub(super) fn part_args(call: &mut ScriptCall, part: &Part) {
    call.num(args::offence(part.offence));
    for rule in args::rules(part.rules) {
        call.num(rule);
    }
    call.push(|w| args::write_approx(w, part.counts.iter().map(|c| c.approx)));
    call.push(|w| {
        w.extend(part.counts.iter().map(|c| match c.own {
            true => b'1',
            false => b'0',
        }))
    });
    for c in part.counts.iter() {
        call.num(c.limit.requests.into()).num(c.limit.window_ms);
    }
}

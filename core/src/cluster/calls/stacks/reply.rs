//! Reading a stacked call's reply: a part's verdict, and each request's
//! integers of a gathered call's.

use super::Part;
use crate::cluster::scripts::replies;
use crate::store::Checked;

/// What the reply to `part`'s call says (`alone`: its call of its own,
/// by the script [`Part::alone`] names; else its integers cut out of a
/// gathered call's, the stacked script's): its verdict names the
/// location's limit.
pub fn part_checked(cluster: bool, reply: &[i64], part: &Part, alone: bool) -> Option<Checked> {
    let one = part.counts.first().map(|c| c.limit);
    match (alone && part.alone().one_limit(), one) {
        (true, Some(limit)) => {
            let mut checked = replies::checked_from_reply(reply, limit, cluster).ok()?;
            checked.verdict.limit = part.at[0];
            Some(checked)
        }
        _ => {
            let kept = (part, &part.at);
            super::super::stacked_checked(cluster, reply, kept, part.rules, part.offence)
        }
    }
}

/// Each request's integers of a [`Calls::stacks`](super::Calls::stacks) reply (`text`, the bulk
/// string) for `n` requests, as the stacked script answers one; `None` if
/// it is not such a reply.
pub fn stacks_reply(text: &[u8], n: usize, cluster: bool) -> Option<Vec<Vec<i64>>> {
    let each = replies::STACKED_REPLY_LEN + usize::from(cluster);
    let mut words = core::str::from_utf8(text).ok()?.split(' ');
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let mut ints = Vec::with_capacity(each);
        for _ in 0..each {
            ints.push(words.next()?.parse().ok()?);
        }
        out.push(ints);
    }
    words.next().is_none().then_some(out)
}

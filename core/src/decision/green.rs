//! The green path without a [`Decision`]'s steps: most requests carry no
//! solution and are under their limits. For them the handler asks the
//! check at once ([`first`]) and, when the check admits the request,
//! takes the made decision from [`admitted`]; anything else (a payment,
//! an exempt key, a trap, a refusal, a block, a store that failed, a next
//! challenge to price) goes through [`Decision::next`] as before, fed the
//! same reply. Both answer exactly what a [`Decision`] answers for those
//! inputs (`tests.rs`, `fast_path_answers_as_the_decision`).

use super::{Decision, Final, Outcome, Payment, Rules};
use crate::limiter::breaker::Block;
use crate::store::{Checked, Offence, Op, Reply};

/// The first operation of a request that pays nothing and has a key, as
/// [`Decision::next`] would ask it; `None`: let the decision start.
pub fn first(rules: &Rules, payment: Payment, exempt: bool) -> Option<Op> {
    let unpaid = matches!(payment, Payment::Unpaid);
    (unpaid && !exempt && !rules.trap && !rules.limits.is_empty()).then_some(Op::Check {
        offence: Offence::Unpaid,
    })
}

/// The decision made for the check's `reply` to [`first`]'s operation,
/// when it admitted the request with nothing more to do; `None`: the
/// decision takes the reply ([`Decision::after_first`]).
pub fn admitted(rules: &Rules, reply: &Reply) -> Option<Final> {
    let Reply::Checked(checked) = reply else {
        return None;
    };
    let verdict = checked.verdict;
    // The next challenge sent ahead is priced by the decision.
    let priced = rules.pay_ahead && !rules.dry_run && verdict.remaining == 0;
    if checked.breaker.block != Block::Clear || !verdict.allowed || priced {
        return None;
    }
    Some(passed(checked))
}

/// Whether the decision `done` is all done once recorded and counted: it
/// lets the request through with nothing to log (no reason, no breaker
/// it opened) and nothing to count in a client's summary (a paid
/// challenge, where `summary`: the location keeps summaries). The
/// handler answers such a request without its keys or its response.
#[inline(always)]
pub fn quiet(done: &Final, summary: bool) -> bool {
    done.answer.is_none()
        && done.reason.is_empty()
        && done.breaker.is_none_or(|s| s.tripped.is_none())
        && !(done.outcome == Outcome::Solved && summary)
}

/// The decision of a request its check admitted with nothing more to do:
/// what [`admitted`] answers, and the straight path's
/// (`Straight::decided`).
#[inline(always)]
pub(crate) fn passed(checked: &Checked) -> Final {
    Final {
        outcome: Outcome::Pass,
        answer: None,
        reason: "",
        verdict: Some(checked.verdict),
        breaker: Some(checked.breaker),
        struck: checked.struck,
        retry_after_ms: None,
        generation: checked.generation,
        pays_back: checked.maybe_struck,
        next: None,
    }
}

impl Decision {
    /// The decision of a request whose first operation ([`first`]) was
    /// asked already: its reply goes to [`Decision::next`].
    pub fn after_first(rules: &Rules, exempt: bool) -> Decision {
        let mut decision = Decision::of(rules, Payment::Unpaid, exempt);
        // The first step only asks: it reads no `trusted=`.
        let _ = decision.next(None, || false);
        decision
    }
}

//! The request decision (docs/operations.md, "How a request is decided")
//! without nginx, behind one entry point: [`Decision::next`] takes the
//! store's reply to what it asked last and says what to do next: ask the
//! store again ([`Next::Ask`]) or finish ([`Next::Done`], with everything
//! the response, the headers, the variables, the metrics and the log need).
//! The access handler only carries that out, so every zone, fail policy,
//! dry run, the spend order and the breaker's rules are tested here, with
//! the same loop against the in-memory store (`tests.rs`).
//!
//! The flow, top to bottom:
//! key → (trap: strike → 404 | block) → check → breaker: block
//!     → green: pass (a valid solution is spent: its 429's strike is
//!       taken back)
//!     → yellow: no solution → 429 + strike
//!               wrong solution → 4xx + strike
//!               solution → spend (takes back a strike) → pass
//!                                                      | strike → 409
#![forbid(unsafe_code)]

mod difficulty;
pub mod green;
pub mod redirect;
pub mod signature;
pub mod straight;
#[cfg(test)]
mod tests;

pub use difficulty::{price_policy, DifficultyRule};

use crate::limiter::breaker::{Block, BreakerRules, BreakerStatus};
use crate::limiter::{Limits, Verdict, MAX_LIMITS};
use crate::protocol::{Rejection, SPENT_MESSAGE, SPENT_STATUS};
use crate::store::{Offence, Op, Reply, Solution, Spent, Struck};
use crate::syntax::FailPolicy;

/// The log line's reason when the zone has no room for `what`.
macro_rules! full_zone {
    ($what:literal) => {
        concat!(
            "zone \"pow_shield\" is full of spent challenges: ",
            $what,
            ", refused"
        )
    };
}

/// What happened to a request, as `$pow_shield_result` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Under the limit (or let through by `pow_shield_fail open`).
    Pass,
    /// Over the limit, answered 429 with a challenge.
    Challenge,
    /// Over the limit with a valid, unspent solution.
    Solved,
    /// Over the limit with a solution that failed verification or was spent.
    Invalid,
    /// Empty key: not counted.
    Exempt,
    /// The store could not decide and the request was refused (503).
    Unavailable,
    /// The circuit breaker is open for this client.
    Blocked,
    /// The client is banned (breaker opened too often).
    Banned,
    /// A request to a trap location (404 and a strike).
    Trap,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Challenge => "challenge",
            Outcome::Solved => "solved",
            Outcome::Invalid => "invalid",
            Outcome::Exempt => "exempt",
            Outcome::Unavailable => "unavailable",
            Outcome::Blocked => "blocked",
            Outcome::Banned => "banned",
            Outcome::Trap => "trap",
        }
    }
}

/// The payment a request offers (its `X-PoW-*` headers), verified before
/// the store is asked (so that a refusal's strike is recorded in the same
/// round trip). It only matters when the client is over its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payment {
    /// Neither `X-PoW-Challenge` nor `X-PoW-Nonce`.
    Unpaid,
    /// A solution that failed verification.
    Invalid(Rejection),
    /// A correct solution; it still has to be spent (whether it can be
    /// now is the store's to say: [`Spent::NotRecorded`]).
    Valid(Solution),
    /// No solution for this policy, but the request paid one under the
    /// policy that decided it before an internal redirect
    /// ([`redirect::after_redirect`]): over this limit it gets a 429 that
    /// counts no strike (the client pays; it ignores no challenge).
    PaidBefore,
}

/// The response to send (the glue builds the bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A JSON body with a fresh challenge: 429, or 409/410/422 with `error`.
    Challenge {
        status: u16,
        error: Option<&'static str>,
        /// The price: leading zero bits.
        bits: u8,
    },
    /// `{"error": message}`.
    Error { status: u16, message: &'static str },
    /// The circuit breaker's plain response (or 444).
    Block(Block),
    /// 503 with `Retry-After`.
    Unavailable,
    /// The trap's 404.
    NotFound,
}

/// What the handler does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Ask the store, then call [`Decision::next`] with its reply.
    Ask(Op),
    /// The decision is made.
    Done(Final),
}

/// A made decision, and what the request learnt on the way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Final {
    pub outcome: Outcome,
    /// `None`: let the request through.
    pub answer: Option<Answer>,
    /// Why, for the log line of a rejection (empty when passed).
    pub reason: &'static str,
    /// The limiter's verdict, for the rate-limit headers (not while
    /// blocked).
    pub verdict: Option<Verdict>,
    /// The client's breaker as the store last reported it.
    pub breaker: Option<BreakerStatus>,
    /// A store recorded a strike for this request.
    pub struck: bool,
    /// A full zone's `Retry-After`.
    pub retry_after_ms: Option<u64>,
    /// The data generation the check answered for the client (a Redis
    /// Cluster slot's), passed on untouched for the challenge sent (the
    /// store says which one it carries); `None`: none answered.
    pub generation: Option<u64>,
    /// The fresh challenge sent stands for a strike still counted that no
    /// store takes back (a solution not recorded, a check Redis may have
    /// struck): paying it takes that one back.
    pub pays_back: bool,
    /// The price, in bits, of the challenge sent ahead with a passed
    /// request (SPEC §4, "Paying ahead"): after it the client has no free
    /// request left, or it paid. `None`: none is sent.
    pub next: Option<u8>,
}

impl Final {
    /// The bits of the challenge the answer sends, if it sends one.
    pub fn bits(&self) -> Option<u8> {
        match self.answer {
            Some(Answer::Challenge { bits, .. }) => Some(bits),
            _ => None,
        }
    }
}

/// The policy of the location that decides (resolved configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    pub limits: Limits,
    pub difficulty: DifficultyRule,
    pub breaker: BreakerRules,
    pub fail: FailPolicy,
    pub dry_run: bool,
    pub trap: bool,
    /// `pow_shield_pay_ahead`: passed requests that leave no free request,
    /// and paid ones, carry the next challenge.
    pub pay_ahead: bool,
}

/// What a decision keeps of its [`Rules`]: of the limits only how many
/// requests each allows (its price's scale), not their names and keys. A
/// decision is made, moved and kept for every request: it copies a few
/// words, not the location's whole limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Kept {
    requests: [u32; MAX_LIMITS],
    limits: u8,
    difficulty: DifficultyRule,
    breaker: BreakerRules,
    fail: FailPolicy,
    dry_run: bool,
    trap: bool,
    pay_ahead: bool,
}

impl Kept {
    fn of(rules: &Rules) -> Kept {
        let mut requests = [0; MAX_LIMITS];
        let limits = rules.limits.as_slice();
        for (kept, limit) in requests.iter_mut().zip(limits) {
            *kept = limit.rate.requests;
        }
        Kept {
            requests,
            limits: limits.len() as u8,
            difficulty: rules.difficulty,
            breaker: rules.breaker,
            fail: rules.fail,
            dry_run: rules.dry_run,
            trap: rules.trap,
            pay_ahead: rules.pay_ahead,
        }
    }

    /// Requests limit number `i` allows, if there is one.
    fn requests(&self, i: usize) -> Option<u32> {
        self.requests[..usize::from(self.limits)].get(i).copied()
    }
}

/// What a decision asked last: the operation without what it carries (a
/// decision is kept and moved for every request; an [`Op`] is a
/// solution's size).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asked {
    Check,
    Spend,
    Strike,
}

/// What a challenge is priced from, as the check answered: the client's
/// strikes, and the refusals under the limit that decided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Priced {
    strikes: u32,
    over: u32,
    limit: u8,
}

/// One request's decision, kept between store round trips.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    rules: Kept,
    payment: Payment,
    exempt: bool,
    /// What was asked last, that the next reply answers.
    asked: Option<Asked>,
    /// What the check answered that a challenge's price needs (not the
    /// whole answer: a decision is copied on every request).
    priced: Priced,
    /// The check admitted the request; a solution it carries is spent only
    /// to take back its challenge's strike.
    green: bool,
    /// What the request learnt so far.
    learnt: Final,
}

impl Decision {
    /// `exempt`: the key is empty.
    pub fn new(rules: Rules, payment: Payment, exempt: bool) -> Self {
        Self::of(&rules, payment, exempt)
    }

    /// As [`Decision::new`], from rules that stay where they are.
    pub fn of(rules: &Rules, payment: Payment, exempt: bool) -> Self {
        Self {
            rules: Kept::of(rules),
            payment,
            exempt,
            asked: None,
            priced: Priced::default(),
            green: false,
            learnt: Final {
                outcome: Outcome::Pass,
                answer: None,
                reason: "",
                verdict: None,
                breaker: None,
                struck: false,
                retry_after_ms: None,
                generation: None,
                pays_back: false,
                next: None,
            },
        }
    }

    /// The next step: `reply` is the store's answer to the last
    /// [`Next::Ask`] (`None` on the first call). `trusted` is the
    /// `trusted=` value of `pow_shield_fail closed`, read only if needed.
    pub fn next(&mut self, reply: Option<Reply>, trusted: impl FnOnce() -> bool) -> Next {
        let asked = self.asked.take();
        if let Some(Reply::Full { retry_after_ms }) = reply {
            self.learnt.retry_after_ms = Some(retry_after_ms);
        }
        match (asked, reply) {
            (None, _) => self.start(),
            (Some(Asked::Check), Some(reply)) => self.checked(reply, trusted),
            (Some(Asked::Spend), Some(reply)) => self.spent(reply, trusted),
            (Some(Asked::Strike), Some(reply)) => self.struck(reply),
            // Asked and not answered: the store failed it.
            (Some(op), None) => {
                self.asked = Some(op);
                self.next(Some(Reply::Down), trusted)
            }
        }
    }

    fn ask(&mut self, op: Op) -> Next {
        self.asked = Some(match op {
            Op::Check { .. } => Asked::Check,
            Op::Spend(_) => Asked::Spend,
            Op::Strike => Asked::Strike,
        });
        Next::Ask(op)
    }

    fn start(&mut self) -> Next {
        if self.rules.trap {
            // A trap has nothing to serve, even to an allow-listed client;
            // only the strike is spared.
            if self.exempt || self.rules.breaker.strikes.is_none() {
                return self.reject(Outcome::Trap, Answer::NotFound, "trap");
            }
            return self.ask(Op::Strike);
        }
        if self.exempt {
            return self.pass(Outcome::Exempt);
        }
        if self.rules.limits == 0 {
            return self.pass(Outcome::Pass);
        }
        let offence = match self.payment {
            Payment::Unpaid => Offence::Unpaid,
            Payment::Invalid(_) => Offence::Failed,
            Payment::Valid(_) | Payment::PaidBefore => Offence::None,
        };
        self.ask(Op::Check { offence })
    }

    /// After the check: red, green or yellow.
    fn checked(&mut self, reply: Reply, trusted: impl FnOnce() -> bool) -> Next {
        let checked = match reply {
            Reply::Checked(checked) => checked,
            // A zone full of unexpired spent records cannot count a new
            // client: passing it uncounted would switch the limiter off
            // (and let a replayed token through as green).
            Reply::Full { .. } => return self.full(full_zone!("request not counted")),
            _ => return self.down(Outcome::Pass, trusted),
        };
        self.priced = Priced {
            strikes: checked.breaker.strikes,
            over: checked.verdict.over,
            limit: checked.verdict.limit,
        };
        self.learnt.generation = checked.generation;
        self.learnt.breaker = Some(checked.breaker);
        self.learnt.struck |= checked.struck;
        self.learnt.pays_back |= checked.maybe_struck;
        if let Some(next) = self.blocked(checked.breaker.block) {
            return next;
        }
        self.learnt.verdict = Some(checked.verdict);
        if checked.verdict.allowed {
            return match self.payment {
                // Paid, but a slot freed while the client solved: the
                // request counts as green, and spending the solution takes
                // back the strike its 429 recorded (a replay just passes:
                // it is green).
                Payment::Valid(solution) if solution.forgive => {
                    self.green = true;
                    self.ask(Op::Spend(solution))
                }
                // Paid ahead (its challenge counted no strike): the
                // solution stays unspent, usable until its `exp`.
                Payment::Valid(_) => self.pass_paid(Outcome::Pass),
                Payment::Unpaid | Payment::Invalid(_) | Payment::PaidBefore => {
                    self.pass_ahead(Outcome::Pass, false)
                }
            };
        }
        match self.payment {
            Payment::Unpaid | Payment::PaidBefore => {
                let answer = self.challenge(429, None);
                self.reject(Outcome::Challenge, answer, "over the limit, challenge sent")
            }
            Payment::Invalid(rejection) => {
                let (status, message) = (rejection.status(), rejection.message());
                let answer = if rejection.wants_fresh_challenge() {
                    self.challenge(status, Some(message))
                } else {
                    Answer::Error { status, message }
                };
                self.reject(Outcome::Invalid, answer, rejection.reason())
            }
            Payment::Valid(solution) => self.ask(Op::Spend(solution)),
        }
    }

    /// After spending: the solution admits the request once (and took
    /// back a strike). A solution not recorded is not accepted, and no
    /// offence (a fresh challenge); a client blocked meanwhile spent
    /// nothing.
    fn spent(&mut self, reply: Reply, trusted: impl FnOnce() -> bool) -> Next {
        if let Reply::Spent(Spent::Accepted(breaker) | Spent::Blocked(breaker)) = reply {
            self.learnt.breaker = Some(breaker);
        }
        if let Reply::Spent(Spent::Blocked(breaker)) = reply {
            if let Some(next) = self.blocked(breaker.block) {
                return next;
            }
        }
        if self.green {
            return self.pass_paid(Outcome::Pass);
        }
        match reply {
            Reply::Spent(Spent::Accepted(_)) => self.pass_paid(Outcome::Solved),
            Reply::Spent(Spent::NotRecorded { pays_back }) => {
                self.learnt.pays_back |= pays_back;
                self.fresh_challenge()
            }
            // A replay is an offence: strike, then answer 409.
            Reply::Spent(Spent::Replayed) if self.rules.breaker.strikes.is_some() => {
                self.ask(Op::Strike)
            }
            Reply::Spent(Spent::Replayed | Spent::Blocked(_)) => self.replayed(),
            Reply::Full { .. } => self.full(full_zone!("solution not recorded")),
            _ => self.down(Outcome::Solved, trusted),
        }
    }

    /// After a strike: a trap answers 404, or the block if the client was
    /// blocked; a replayed solution gets its 409 whatever the strike says.
    fn struck(&mut self, reply: Reply) -> Next {
        if let Reply::Struck(Struck { breaker, struck }) = reply {
            self.learnt.breaker = Some(breaker);
            self.learnt.struck |= struck;
            if self.rules.trap {
                if let Some(next) = self.blocked(breaker.block) {
                    return next;
                }
            }
        }
        if !self.rules.trap {
            return self.replayed();
        }
        self.reject(Outcome::Trap, Answer::NotFound, "trap")
    }

    fn fresh_challenge(&mut self) -> Next {
        let answer = self.challenge(429, None);
        self.reject(
            Outcome::Challenge,
            answer,
            "solution not spendable now, fresh challenge sent",
        )
    }

    fn replayed(&mut self) -> Next {
        let answer = self.challenge(SPENT_STATUS, Some(SPENT_MESSAGE));
        self.reject(Outcome::Invalid, answer, "spent")
    }

    /// The red zone: blocked clients get the cheap answer and nothing else
    /// (no rate-limit headers either).
    fn blocked(&mut self, block: Block) -> Option<Next> {
        let (outcome, reason) = match block {
            Block::Clear => return None,
            Block::Blocked => (Outcome::Blocked, "circuit breaker open, blocked"),
            Block::Banned => (Outcome::Banned, "banned"),
        };
        self.learnt.verdict = None;
        Some(self.reject(outcome, Answer::Block(block), reason))
    }

    /// The zone had no room: refused, never passed (docs/operations.md, "Sizing the zone").
    fn full(&mut self, what: &'static str) -> Next {
        self.reject(Outcome::Unavailable, Answer::Unavailable, what)
    }

    /// The store is down: `pow_shield_fail` (the `local` fallback was
    /// already tried by the store chain).
    fn down(&mut self, admitted: Outcome, trusted: impl FnOnce() -> bool) -> Next {
        match self.rules.fail {
            FailPolicy::Closed if !trusted() => self.reject(
                Outcome::Unavailable,
                Answer::Unavailable,
                "rate limiter store unavailable, refused (pow_shield_fail closed)",
            ),
            _ => self.pass(admitted),
        }
    }

    fn challenge(&self, status: u16, error: Option<&'static str>) -> Answer {
        let Priced {
            strikes,
            over,
            limit,
        } = self.priced;
        Answer::Challenge {
            status,
            error,
            bits: self.price(strikes, limit, over),
        }
    }

    /// The bits asked of a client with `strikes` that has had `over`
    /// requests refused under its limit number `limit`.
    fn price(&self, strikes: u32, limit: u8, over: u32) -> u8 {
        let requests = self.rules.requests(usize::from(limit)).unwrap_or(1);
        self.rules.difficulty.for_client(strikes, over, requests)
    }

    /// A request that carried a solution passes; the next challenge goes
    /// with it.
    fn pass_paid(&mut self, outcome: Outcome) -> Next {
        self.pass_ahead(outcome, true)
    }

    /// A request passes with the next challenge when it `paid`, or when
    /// the client has no free request left after it: at the price that
    /// request will be asked (one more refusal, the strikes as they are
    /// now). A dry run never asks a price.
    fn pass_ahead(&mut self, outcome: Outcome, paid: bool) -> Next {
        if let (true, false, Some(verdict)) = (
            self.rules.pay_ahead,
            self.rules.dry_run,
            self.learnt.verdict,
        ) {
            if paid || verdict.remaining == 0 {
                let strikes = self.learnt.breaker.map_or(0, |b| b.strikes);
                let over = verdict.over.saturating_add(1);
                self.learnt.next = Some(self.price(strikes, verdict.limit, over));
            }
        }
        self.pass(outcome)
    }

    /// A rejection; in a dry run it is decided and logged, not enforced.
    fn reject(&mut self, outcome: Outcome, answer: Answer, reason: &'static str) -> Next {
        self.finish(outcome, (!self.rules.dry_run).then_some(answer), reason)
    }

    fn pass(&mut self, outcome: Outcome) -> Next {
        self.finish(outcome, None, "")
    }

    fn finish(&mut self, outcome: Outcome, answer: Option<Answer>, reason: &'static str) -> Next {
        self.learnt.outcome = outcome;
        self.learnt.answer = answer;
        self.learnt.reason = reason;
        Next::Done(self.learnt)
    }
}

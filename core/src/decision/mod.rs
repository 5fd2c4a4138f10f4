//! The request decision (docs/operations.md, "How a request is decided") without nginx: given what the request
//! carries and what the store answered, the next step. The access handler
//! only carries steps out (ask a store, send a response), so every zone,
//! fail policy, dry run, the spend order and the red-zone rules are tested
//! here with a fake store (`tests.rs`).
//!
//! The flow, top to bottom:
//! key → (trap: strike → 404 | block) → check → red: block
//!     → green: pass (a valid solution is spent: its 429's strike is
//!       taken back)
//!     → yellow: no solution → 429 + strike
//!               wrong solution → 4xx + strike
//!               solution → spend (takes back a strike) → pass
//!                                                      | strike → 409
#![forbid(unsafe_code)]

mod difficulty;
#[cfg(test)]
mod tests;

pub use difficulty::DifficultyRule;

use crate::limiter::strikes::{Block, RedRules, Standing};
use crate::limiter::{RateLimit, Spent, Verdict};
use crate::protocol::{Rejection, Solved, SPENT_MESSAGE, SPENT_STATUS};
use crate::values::FailPolicy;

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

/// What the request carries, verified before the store is asked (so that a
/// refusal's strike is recorded in the same round trip). It only matters
/// when the client is over its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carried {
    /// Neither `X-PoW-Challenge` nor `X-PoW-Nonce`.
    Nothing,
    /// A solution that failed verification.
    Invalid(Rejection),
    /// A correct solution; it still has to be spent.
    Valid(Solved),
}

/// A store's answer as the decision sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply<T> {
    Ready(T),
    /// The store (Redis) is down and no fallback answered:
    /// `pow_shield_fail` decides.
    Down,
    /// The zone could not hold the record even after eviction (it is full
    /// of unexpired spent records).
    Full,
}

/// The store's answer to a check: the limiter's verdict and the client's
/// red-zone standing, from one round trip.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Checked {
    pub verdict: Verdict,
    pub standing: Standing,
}

/// The response to send (the glue builds the bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A JSON body with a fresh challenge: 429, or 409/410/422 with `error`.
    Challenge {
        status: u16,
        error: Option<&'static str>,
        difficulty: u8,
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

/// The next thing the handler does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Count the request; a refusal is a strike when `offence`.
    Check { offence: bool },
    /// Mark the solution spent.
    Spend(Solved),
    /// Record a strike and report the standing (a trap hit, a replay).
    Strike,
    /// The decision is made.
    End(End),
}

/// A decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct End {
    pub outcome: Outcome,
    /// `None`: let the request through.
    pub answer: Option<Answer>,
    /// Why, for the log line of a rejection.
    pub reason: &'static str,
}

/// The policy of the location that decides (resolved configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    pub limit: Option<RateLimit>,
    pub difficulty: DifficultyRule,
    pub red: RedRules,
    pub fail: FailPolicy,
    pub dry_run: bool,
    pub trap: bool,
}

/// One request's decision, kept between store round trips.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    rules: Rules,
    carried: Carried,
    /// What the check answered, for the challenge's difficulty.
    checked: Checked,
    /// The check admitted the request; a solution it carries is spent only
    /// to take back its challenge's strike.
    green: bool,
}

impl Decision {
    pub fn new(rules: Rules, carried: Carried) -> Self {
        Self {
            rules,
            carried,
            checked: Checked::default(),
            green: false,
        }
    }

    /// The first step. `exempt`: the key is empty.
    pub fn start(&self, exempt: bool) -> Step {
        if self.rules.trap {
            // A trap has nothing to serve, even to an allow-listed client;
            // only the strike is spared.
            if exempt || self.rules.red.strikes.is_none() {
                return self.reject(Outcome::Trap, Answer::NotFound, "trap");
            }
            return Step::Strike;
        }
        if exempt {
            return pass(Outcome::Exempt);
        }
        if self.rules.limit.is_none() {
            return pass(Outcome::Pass);
        }
        Step::Check {
            offence: !matches!(self.carried, Carried::Valid(_)),
        }
    }

    /// After the check: red, green or yellow.
    pub fn checked(&mut self, reply: Reply<Checked>, trusted: impl FnOnce() -> bool) -> Step {
        let checked = match reply {
            Reply::Ready(checked) => checked,
            // A zone full of unexpired spent records cannot count a new
            // client: passing it uncounted would switch the limiter off
            // (and let a replayed token through as green).
            Reply::Full => return self.full(full_zone!("request not counted")),
            Reply::Down => return self.down(Outcome::Pass, trusted),
        };
        self.checked = checked;
        if let Some(step) = self.red(checked.standing.block) {
            return step;
        }
        if checked.verdict.allowed {
            // Paid, but a slot freed while the client solved: the request
            // counts as green, and spending the solution takes back the
            // strike its 429 recorded (a replay just passes: it is green).
            if let Carried::Valid(solved) = self.carried {
                self.green = true;
                return Step::Spend(solved);
            }
            return pass(Outcome::Pass);
        }
        match self.carried {
            Carried::Nothing => self.reject(
                Outcome::Challenge,
                self.challenge(429, None),
                "over the limit, challenge sent",
            ),
            Carried::Invalid(rejection) => {
                let (status, message) = (rejection.status(), rejection.message());
                let answer = if rejection.wants_fresh_challenge() {
                    self.challenge(status, Some(message))
                } else {
                    Answer::Error { status, message }
                };
                self.reject(Outcome::Invalid, answer, rejection.reason())
            }
            Carried::Valid(solved) => Step::Spend(solved),
        }
    }

    /// After spending: the solution admits the request once (and took
    /// back a strike). A solution that cannot be recorded is not accepted;
    /// a client blocked meanwhile spent nothing.
    pub fn spent(&self, reply: Reply<Spent>, trusted: impl FnOnce() -> bool) -> Step {
        if let Reply::Ready(Spent::Blocked(standing)) = reply {
            if let Some(step) = self.red(standing.block) {
                return step;
            }
        }
        if self.green {
            return pass(Outcome::Pass);
        }
        match reply {
            Reply::Ready(Spent::Accepted(_)) => pass(Outcome::Solved),
            // A replay is an offence: strike, then answer 409.
            Reply::Ready(Spent::Replayed) if self.rules.red.strikes.is_some() => Step::Strike,
            Reply::Ready(Spent::Replayed | Spent::Blocked(_)) => self.replayed(),
            Reply::Full => self.full(full_zone!("solution not recorded")),
            Reply::Down => self.down(Outcome::Solved, trusted),
        }
    }

    /// After a strike: a trap answers 404, or the block if the client was
    /// blocked; a replayed solution gets its 409 whatever the strike says.
    pub fn struck(&self, reply: Reply<Standing>) -> Step {
        if !self.rules.trap {
            return self.replayed();
        }
        if let Reply::Ready(standing) = reply {
            if let Some(step) = self.red(standing.block) {
                return step;
            }
        }
        self.reject(Outcome::Trap, Answer::NotFound, "trap")
    }

    fn replayed(&self) -> Step {
        let answer = self.challenge(SPENT_STATUS, Some(SPENT_MESSAGE));
        self.reject(Outcome::Invalid, answer, "spent")
    }

    /// The red zone: blocked clients get the cheap answer and nothing else.
    fn red(&self, block: Block) -> Option<Step> {
        let (outcome, reason) = match block {
            Block::Clear => return None,
            Block::Blocked => (Outcome::Blocked, "circuit breaker open, blocked"),
            Block::Banned => (Outcome::Banned, "banned"),
        };
        Some(self.reject(outcome, Answer::Block(block), reason))
    }

    /// The zone had no room: refused, never passed (docs/operations.md, "Sizing the zone").
    fn full(&self, what: &'static str) -> Step {
        self.reject(Outcome::Unavailable, Answer::Unavailable, what)
    }

    /// The store is down: `pow_shield_fail` (the `local` fallback was
    /// already tried by the store chain).
    fn down(&self, admitted: Outcome, trusted: impl FnOnce() -> bool) -> Step {
        match self.rules.fail {
            FailPolicy::Closed if !trusted() => self.reject(
                Outcome::Unavailable,
                Answer::Unavailable,
                "rate limiter store unavailable, refused (pow_shield_fail closed)",
            ),
            _ => pass(admitted),
        }
    }

    fn challenge(&self, status: u16, error: Option<&'static str>) -> Answer {
        let Checked { verdict, standing } = self.checked;
        let limit = self.rules.limit.map_or(1, |l| l.requests);
        Answer::Challenge {
            status,
            error,
            difficulty: self
                .rules
                .difficulty
                .for_client(standing.strikes, verdict.over, limit),
        }
    }

    /// A rejection; in a dry run it is decided and logged, not enforced.
    fn reject(&self, outcome: Outcome, answer: Answer, reason: &'static str) -> Step {
        Step::End(End {
            outcome,
            answer: (!self.rules.dry_run).then_some(answer),
            reason,
        })
    }
}

impl End {
    /// Let the request through.
    pub fn pass(outcome: Outcome) -> End {
        End {
            outcome,
            answer: None,
            reason: "",
        }
    }
}

fn pass(outcome: Outcome) -> Step {
    Step::End(End::pass(outcome))
}

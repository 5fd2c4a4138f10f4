//! What to do after each response: the one policy the CLI and the
//! middleware share.

use std::time::Duration;

use crate::challenge::{Answer, Challenge};
use crate::{Error, SolveOptions};

/// Limits and preferences of a paying client.
///
/// The default pays every challenge, giving up on one after
/// [`crate::DEFAULT_MAX_SOLVE_TIME`] (30 s, [`Error::Timeout`]; set
/// `solve.max_solve_time` to `None` for no limit), with 5 retries per
/// request, no waiting and at most 4 requests in flight per origin until the
/// server shows room; it pays ahead (a response's next challenge is solved
/// for the next request) and does not pace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Threads, `max_difficulty`, `max_solve_time` (30 s by default),
    /// progress.
    pub solve: SolveOptions,
    /// Sleep `Retry-After` instead of paying when the server says how long
    /// (429 and 503), as long as it is at most `max_wait`.
    pub prefer_wait: bool,
    /// Longest `Retry-After` worth sleeping; longer waits are paid instead.
    pub max_wait: Duration,
    /// Retries per request (solves and waits together).
    pub max_retries: u32,
    /// Requests in flight per origin while the client may be over the
    /// limit ([`crate::gate`]): `n - 1` for the server's `n` strikes, 4 by
    /// default; the server's `Remaining` opens it further.
    pub in_flight: usize,
    /// Solve the next challenge a response carries (`X-PoW-Next-Challenge`)
    /// while it is read, and send the solution with the next request to
    /// that origin ([`crate::ahead`]): one round trip per paid request, no
    /// 429. On by default.
    pub pay_ahead: bool,
    /// Pace: when the server's `RateLimit` / `X-RateLimit-Remaining` say no
    /// free request is left, wait for the reset (when it is at most
    /// `max_wait` away) before the next request to that origin, instead
    /// of paying. Off by default.
    pub pace: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            solve: SolveOptions::default(),
            prefer_wait: false,
            max_wait: Duration::from_secs(60),
            max_retries: 5,
            in_flight: crate::gate::DEFAULT_IN_FLIGHT,
            pay_ahead: true,
            pace: false,
        }
    }
}

/// The next move for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Hand this response to the caller.
    Return,
    /// Sleep, then send the request again without a solution.
    Wait(Duration),
    /// Solve this challenge and send the request again with the solution.
    Solve(Challenge),
    /// Stop with this error.
    Fail(Error),
}

/// Follows one request through its retries.
#[derive(Clone, Debug)]
pub struct Retrier {
    policy: Policy,
    retries: u32,
}

impl Retrier {
    /// A fresh request under `policy`.
    pub fn new(policy: Policy) -> Retrier {
        Retrier { policy, retries: 0 }
    }

    /// Retries made so far.
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// Decides what to do with `answer`. Difficulty limits are checked
    /// here too, so nothing is sent after a challenge that is too hard.
    pub fn next(&mut self, answer: Answer) -> Step {
        self.next_within(answer, None)
    }

    /// [`Retrier::next`] for a request with `time_left` (`None`: no
    /// limit): a `Retry-After` that would not end within it is not waited
    /// (a 429 is paid instead, a 503 handed back), as one beyond
    /// `max_wait`.
    pub fn next_within(&mut self, answer: Answer, time_left: Option<Duration>) -> Step {
        match answer {
            Answer::Pass => Step::Return,
            Answer::Refused(e) => Step::Fail(e),
            Answer::Unavailable { retry_after } => match self.waitable(retry_after, time_left) {
                Some(d) if self.retries < self.policy.max_retries => {
                    self.retries += 1;
                    Step::Wait(d)
                }
                _ => Step::Return,
            },
            Answer::Challenge(c) => {
                if self.retries >= self.policy.max_retries {
                    return Step::Fail(Error::GaveUp {
                        attempts: self.retries,
                    });
                }
                if let Some(max) = self.policy.solve.max_difficulty {
                    if c.difficulty > max {
                        return Step::Fail(Error::TooHard {
                            difficulty: c.difficulty,
                            max,
                        });
                    }
                }
                self.retries += 1;
                // A plain 429 may be waited out; the last retry pays, so
                // waiting never ends in giving up.
                let last = self.retries >= self.policy.max_retries;
                match self.waitable(c.retry_after, time_left) {
                    Some(d) if c.status == 429 && !last => Step::Wait(d),
                    _ => Step::Solve(c),
                }
            }
        }
    }

    fn waitable(
        &self,
        retry_after: Option<Duration>,
        time_left: Option<Duration>,
    ) -> Option<Duration> {
        retry_after.filter(|d| {
            self.policy.prefer_wait
                && *d <= self.policy.max_wait
                && time_left.is_none_or(|left| *d < left)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn challenge(status: u16, difficulty: u8, retry_after: Option<u64>) -> Answer {
        Answer::Challenge(Challenge {
            status,
            token: "t.m".into(),
            salt: "ab".repeat(16),
            difficulty,
            bits: 4 * difficulty,
            work: pow_shield_protocol::Work::Sha256,
            retry_after: retry_after.map(Duration::from_secs),
        })
    }

    fn waiting() -> Policy {
        Policy {
            prefer_wait: true,
            ..Policy::default()
        }
    }

    #[test]
    fn challenge_is_solved_by_default() {
        let mut r = Retrier::new(Policy::default());
        assert!(matches!(r.next(challenge(429, 4, Some(3))), Step::Solve(_)));
    }

    #[test]
    fn prefer_wait_sleeps_retry_after_of_a_429() {
        let mut r = Retrier::new(waiting());
        assert_eq!(
            r.next(challenge(429, 4, Some(3))),
            Step::Wait(Duration::from_secs(3))
        );
    }

    #[test]
    fn prefer_wait_pays_when_the_wait_is_too_long_or_unknown() {
        let mut r = Retrier::new(waiting());
        assert!(matches!(
            r.next(challenge(429, 4, Some(61))),
            Step::Solve(_)
        ));
        assert!(matches!(r.next(challenge(429, 4, None)), Step::Solve(_)));
    }

    #[test]
    fn fresh_challenge_after_a_refused_solution_is_solved_even_when_waiting() {
        let mut r = Retrier::new(waiting());
        for status in [409, 410, 422] {
            assert!(matches!(
                r.next(challenge(status, 4, Some(1))),
                Step::Solve(_)
            ));
        }
    }

    #[test]
    fn last_retry_pays_instead_of_waiting() {
        let mut r = Retrier::new(Policy {
            max_retries: 2,
            ..waiting()
        });
        assert!(matches!(r.next(challenge(429, 4, Some(1))), Step::Wait(_)));
        assert!(matches!(r.next(challenge(429, 4, Some(1))), Step::Solve(_)));
        assert_eq!(
            r.next(challenge(429, 4, Some(1))),
            Step::Fail(Error::GaveUp { attempts: 2 })
        );
    }

    #[test]
    fn the_default_policy_gives_up_on_a_challenge_after_30_s() {
        assert_eq!(
            Policy::default().solve.max_solve_time,
            Some(Duration::from_secs(30))
        );
    }

    #[test]
    fn a_wait_that_would_outlast_the_time_left_is_paid_or_handed_back() {
        let left = |s| Some(Duration::from_secs(s));
        for (answer, time_left, waits) in [
            (challenge(429, 4, Some(3)), None, true),
            (challenge(429, 4, Some(3)), left(4), true),
            (challenge(429, 4, Some(3)), left(3), false),
            (challenge(429, 4, Some(30)), left(3), false),
        ] {
            let step = Retrier::new(waiting()).next_within(answer, time_left);
            assert_eq!(matches!(step, Step::Wait(_)), waits, "{time_left:?}");
            assert!(waits || matches!(step, Step::Solve(_)), "{step:?}");
        }
        let unavailable = Answer::Unavailable {
            retry_after: Some(Duration::from_secs(5)),
        };
        assert_eq!(
            Retrier::new(waiting()).next_within(unavailable, left(2)),
            Step::Return
        );
    }

    #[test]
    fn too_hard_fails_before_solving() {
        let mut r = Retrier::new(Policy {
            solve: SolveOptions {
                max_difficulty: Some(3),
                ..SolveOptions::default()
            },
            ..Policy::default()
        });
        assert_eq!(
            r.next(challenge(429, 4, None)),
            Step::Fail(Error::TooHard {
                difficulty: 4,
                max: 3
            })
        );
    }

    #[test]
    fn unavailable_is_waited_out_only_when_preferred() {
        let a = Answer::Unavailable {
            retry_after: Some(Duration::from_secs(1)),
        };
        assert_eq!(
            Retrier::new(Policy::default()).next(a.clone()),
            Step::Return
        );
        assert_eq!(
            Retrier::new(waiting()).next(a),
            Step::Wait(Duration::from_secs(1))
        );
    }

    #[test]
    fn refusals_fail_and_passes_return() {
        let mut r = Retrier::new(Policy::default());
        assert_eq!(
            r.next(Answer::Refused(Error::Banned { status: 403 })),
            Step::Fail(Error::Banned { status: 403 })
        );
        assert_eq!(r.next(Answer::Pass), Step::Return);
    }
}

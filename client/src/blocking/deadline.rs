//! The time limit of one request as a whole (curl's `-m`, `--max-time`):
//! every try, solve and wait of it, and its answer's body, end by one
//! deadline. A wait that would not end before it is not taken (the
//! challenge is paid instead, as one beyond `max_wait`); a solve gets what
//! is left, and running out there is the time limit's, not the solver's.

use std::time::{Duration, Instant};

use crate::{Error, SolveOptions};

/// When a request must be over; `None`: no limit.
#[derive(Clone, Copy, Debug)]
pub(super) struct Deadline(Option<Instant>);

impl Deadline {
    /// The deadline at `end`.
    pub(super) fn at(end: Option<Instant>) -> Deadline {
        Deadline(end)
    }

    /// The time left (`Ok(None)`: no limit), or [`Error::TimedOut`] when
    /// none is.
    pub(super) fn left(&self) -> Result<Option<Duration>, Error> {
        left_at(self.0, Instant::now())
    }

    /// `options` with its solve time cut to what is left, and whether the
    /// cut is the deadline's.
    pub(super) fn solve_options(
        &self,
        options: &SolveOptions,
    ) -> Result<(SolveOptions, bool), Error> {
        Ok(cut(options, self.left()?))
    }
}

fn left_at(deadline: Option<Instant>, now: Instant) -> Result<Option<Duration>, Error> {
    match deadline {
        None => Ok(None),
        Some(end) if end > now => Ok(Some(end - now)),
        Some(_) => Err(ran_out("before the next try")),
    }
}

fn cut(options: &SolveOptions, left: Option<Duration>) -> (SolveOptions, bool) {
    let mut options = options.clone();
    let Some(left) = left else {
        return (options, false);
    };
    let cut = options.max_solve_time.is_none_or(|own| left < own);
    if cut {
        options.max_solve_time = Some(left);
    }
    (options, cut)
}

/// A solve's error, as the deadline explains it: its timeout is the time
/// limit's when the deadline cut it.
pub(super) fn explain(error: Error, cut: bool) -> Error {
    match error {
        Error::Timeout { .. } if cut => ran_out("while solving a challenge"),
        other => other,
    }
}

fn ran_out(when: &str) -> Error {
    Error::TimedOut(format!("the time limit of the request ran out {when}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_is_none_without_a_limit_and_an_error_once_over() {
        let now = Instant::now();
        assert_eq!(left_at(None, now), Ok(None));
        assert_eq!(
            left_at(Some(now + Duration::from_secs(2)), now),
            Ok(Some(Duration::from_secs(2)))
        );
        assert!(matches!(left_at(Some(now), now), Err(Error::TimedOut(_))));
    }

    #[test]
    fn a_solve_gets_the_shorter_of_its_own_limit_and_the_time_left() {
        let own = SolveOptions::default(); // 30 s
        let second = Some(Duration::from_secs(1));
        for (options, left, solve_time, by_deadline) in [
            (own.clone(), None, Some(Duration::from_secs(30)), false),
            (own.clone(), second, second, true),
            (
                own.clone(),
                Some(Duration::from_secs(40)),
                Some(Duration::from_secs(30)),
                false,
            ),
            (
                SolveOptions {
                    max_solve_time: None,
                    ..own.clone()
                },
                second,
                second,
                true,
            ),
        ] {
            let (got, cut) = cut(&options, left);
            assert_eq!(
                (got.max_solve_time, cut),
                (solve_time, by_deadline),
                "{left:?}"
            );
        }
    }

    #[test]
    fn a_solve_timeout_is_the_time_limit_only_when_the_deadline_cut_it() {
        let timeout = Error::Timeout {
            difficulty: 9,
            after: Duration::from_secs(1),
        };
        assert!(matches!(explain(timeout.clone(), true), Error::TimedOut(_)));
        assert_eq!(explain(timeout.clone(), false), timeout);
        assert_eq!(explain(Error::Cancelled, true), Error::Cancelled);
    }
}

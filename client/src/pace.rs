//! Pacing (`Policy::pace`): what the rate-limit headers say about when an
//! origin's limit frees up again, so that a client whose free requests ran
//! out waits for the reset instead of paying (no 429, no work).
//!
//! The numbers are the server's (docs/protocol.md §2): `RateLimit:
//! "pow-shield";r=<remaining>;t=<seconds to reset>` (the item with the
//! lowest `r`), else `X-RateLimit-Remaining` and `X-RateLimit-Reset` (epoch
//! seconds). Both round up, so once the reset has passed at least one
//! request is free again; how many, only the next answer says: so after a
//! reset one request goes, and the others in flight wait for its answer
//! (they would all go at once, and all but the freed ones pay).

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use crate::gate::remaining;

const HEADER_RATELIMIT: &str = "RateLimit";
const HEADER_RESET: &str = "X-RateLimit-Reset";

/// What the latest answer of one origin said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Window {
    /// Requests left unchallenged, counted down by each send since.
    remaining: u64,
    /// When the window frees up; `None` when the answer did not say.
    reset_at: Option<Instant>,
}

/// What a request about to go to an origin does under pacing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pace {
    /// Send now. `Some(turn)`: it is the one request sent once a reset has
    /// passed, whose answer the others wait for (how much the reset freed
    /// is known only from it); [`Pacer::release`] ends the turn.
    Go(Option<u64>),
    /// Sleep until the reset, then ask again.
    Sleep(Duration),
    /// Another request went at the reset: wait for an answer, then ask again.
    AwaitAnswer,
}

#[derive(Debug, Default)]
struct State {
    windows: HashMap<String, Window>,
    /// The turn of the request sent after a reset, per origin.
    probes: HashMap<String, u64>,
    turns: u64,
}

/// Per-origin pacing state, shared by every request of a client.
#[derive(Debug, Default)]
pub(crate) struct Pacer {
    state: Mutex<State>,
    answered: Condvar,
    #[cfg(feature = "reqwest")]
    notify: tokio::sync::Notify,
}

impl Pacer {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake(&self) {
        self.answered.notify_all();
        #[cfg(feature = "reqwest")]
        self.notify.notify_waiters();
    }

    /// Notes what one answer from `origin` says (nothing when it carries
    /// no rate-limit numbers, e.g. an exempt client's); any answer ends
    /// the wait of the requests held back after a reset.
    pub(crate) fn saw<'h>(&self, origin: &str, lookup: impl Fn(&str) -> Option<&'h str> + Copy) {
        let left = remaining(lookup);
        let reset_at =
            reset_in(lookup, SystemTime::now()).and_then(|d| Instant::now().checked_add(d));
        let mut state = self.lock();
        let probed = state.probes.remove(origin).is_some();
        match left {
            Some(remaining) => {
                let w = Window {
                    remaining,
                    reset_at,
                };
                state.windows.insert(origin.to_owned(), w);
            }
            // Nothing known of the new window: nobody is held back.
            None if probed => drop(state.windows.remove(origin)),
            None => {}
        }
        drop(state);
        if probed {
            self.wake();
        }
    }

    /// What a request about to go to `origin` does: wait until the reset
    /// when no free request is left and the reset is at most `max_wait`
    /// away; once it has passed, one request goes and the others wait for
    /// its answer; else it goes (and one free request is counted off).
    pub(crate) fn before_send(&self, origin: &str, max_wait: Duration) -> Pace {
        let now = Instant::now();
        let mut state = self.lock();
        if state.probes.contains_key(origin) {
            return Pace::AwaitAnswer;
        }
        let Some(w) = state.windows.get_mut(origin) else {
            return Pace::Go(None);
        };
        if w.remaining > 0 {
            w.remaining -= 1;
            return Pace::Go(None);
        }
        match w.reset_at.map(|at| at.saturating_duration_since(now)) {
            Some(wait) if wait.is_zero() => {
                // The reset has passed: this request goes, and what the
                // origin says to it counts.
                state.windows.remove(origin);
                state.turns += 1;
                let turn = state.turns;
                state.probes.insert(origin.to_owned(), turn);
                Pace::Go(Some(turn))
            }
            Some(wait) if wait <= max_wait => Pace::Sleep(wait),
            _ => Pace::Go(None),
        }
    }

    /// The request of `turn` is over (answered or not): the others wait no
    /// longer for it.
    pub(crate) fn release(&self, origin: &str, turn: u64) {
        let mut state = self.lock();
        if state.probes.get(origin) == Some(&turn) {
            state.probes.remove(origin);
            drop(state);
            self.wake();
        }
    }

    /// Blocks until the request sent after the reset has its answer, at
    /// most `max_wait`.
    pub(crate) fn await_answer(&self, origin: &str, max_wait: Duration) {
        let state = self.lock();
        let _ = self
            .answered
            .wait_timeout_while(state, max_wait, |s| s.probes.contains_key(origin))
            .unwrap_or_else(PoisonError::into_inner);
    }

    /// [`Pacer::await_answer`] without blocking the executor.
    #[cfg(feature = "reqwest")]
    pub(crate) async fn await_answer_async(&self, origin: &str, max_wait: Duration) {
        let wait = async {
            loop {
                let mut notified = std::pin::pin!(self.notify.notified());
                notified.as_mut().enable();
                if !self.lock().probes.contains_key(origin) {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(max_wait, wait).await;
    }

    /// Whether [`Pacer::before_send`] would sleep now (then a next
    /// challenge is not worth solving).
    pub(crate) fn would_wait(&self, origin: &str, max_wait: Duration) -> bool {
        let now = Instant::now();
        self.lock().windows.get(origin).is_some_and(|w| {
            w.remaining == 0
                && w.reset_at
                    .map(|at| at.saturating_duration_since(now))
                    .is_some_and(|wait| !wait.is_zero() && wait <= max_wait)
        })
    }
}

/// The time until the window frees up that an answer shows: `t=` of the
/// `RateLimit` item with the lowest `r=`, else `X-RateLimit-Reset` (epoch
/// seconds) less `now`.
pub(crate) fn reset_in<'h>(
    lookup: impl Fn(&str) -> Option<&'h str>,
    now: SystemTime,
) -> Option<Duration> {
    let ietf = lookup(HEADER_RATELIMIT).and_then(|v| {
        v.split(',')
            .filter_map(|item| {
                let param = |name: &str| {
                    item.split(';')
                        .skip(1)
                        .filter_map(|p| p.trim().strip_prefix(name))
                        .find_map(|n| n.trim().parse::<u64>().ok())
                };
                Some((param("r=")?, param("t=")?))
            })
            .min()
            .map(|(_, t)| Duration::from_secs(t))
    });
    ietf.or_else(|| {
        let at = lookup(HEADER_RESET)?.trim().parse::<u64>().ok()?;
        let now = now.duration_since(SystemTime::UNIX_EPOCH).ok()?;
        Some(Duration::from_secs(at).saturating_sub(now))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: &str = "http://h:80";

    fn headers<'a>(list: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> + Copy + 'a {
        move |name| {
            list.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| *v)
        }
    }

    #[test]
    fn reset_is_the_t_of_the_lowest_r_else_x_ratelimit_reset() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let ietf = [("RateLimit", r#""a";r=5;t=9, "b";r=0;t=2"#)];
        assert_eq!(reset_in(headers(&ietf), now), Some(Duration::from_secs(2)));
        let x = [("X-RateLimit-Reset", "1003")];
        assert_eq!(reset_in(headers(&x), now), Some(Duration::from_secs(3)));
        let past = [("X-RateLimit-Reset", "999")];
        assert_eq!(reset_in(headers(&past), now), Some(Duration::ZERO));
        assert_eq!(reset_in(headers(&[("RateLimit", "junk")]), now), None);
    }

    fn sleeps(pace: Pace) -> Option<Duration> {
        match pace {
            Pace::Sleep(d) => Some(d),
            _ => None,
        }
    }

    #[test]
    fn no_free_request_left_waits_for_the_reset_within_max_wait() {
        let p = Pacer::default();
        p.saw(ORIGIN, headers(&[("RateLimit", r#""pow-shield";r=0;t=2"#)]));
        let wait = sleeps(p.before_send(ORIGIN, Duration::from_secs(60))).unwrap();
        assert!(wait > Duration::from_secs(1) && wait <= Duration::from_secs(2));
        assert!(p.would_wait(ORIGIN, Duration::from_secs(60)));
        // Beyond max_wait the request goes (and pays).
        assert_eq!(
            p.before_send(ORIGIN, Duration::from_secs(1)),
            Pace::Go(None)
        );
        assert!(!p.would_wait(ORIGIN, Duration::from_secs(1)));
    }

    #[test]
    fn free_requests_are_counted_off_before_any_wait() {
        let p = Pacer::default();
        let h = [
            ("X-RateLimit-Remaining", "2"),
            ("X-RateLimit-Reset", "99999999999"),
        ];
        p.saw(ORIGIN, headers(&h));
        let long = Duration::from_secs(u64::MAX / 4);
        assert_eq!(p.before_send(ORIGIN, long), Pace::Go(None));
        assert_eq!(p.before_send(ORIGIN, long), Pace::Go(None));
        assert!(sleeps(p.before_send(ORIGIN, long)).is_some());
    }

    #[test]
    fn after_the_reset_one_request_goes_and_the_others_wait_for_its_answer() {
        let p = Pacer::default();
        let minute = Duration::from_secs(60);
        p.saw(ORIGIN, headers(&[("RateLimit", r#""pow-shield";r=0;t=0"#)]));
        let Pace::Go(Some(turn)) = p.before_send(ORIGIN, minute) else {
            panic!("the first request after the reset goes");
        };
        assert_eq!(p.before_send(ORIGIN, minute), Pace::AwaitAnswer);
        assert_eq!(p.before_send(ORIGIN, minute), Pace::AwaitAnswer);
        // Its answer: one free request, then the reset a while away.
        let one = [("RateLimit", r#""pow-shield";r=1;t=30"#)];
        p.saw(ORIGIN, headers(&one));
        assert_eq!(p.before_send(ORIGIN, minute), Pace::Go(None));
        assert!(sleeps(p.before_send(ORIGIN, minute)).is_some());
        p.release(ORIGIN, turn);
        assert!(sleeps(p.before_send(ORIGIN, minute)).is_some());
    }

    #[test]
    fn a_request_sent_after_the_reset_without_an_answer_lets_the_next_go() {
        let p = Pacer::default();
        let minute = Duration::from_secs(60);
        p.saw(ORIGIN, headers(&[("RateLimit", r#""pow-shield";r=0;t=0"#)]));
        let Pace::Go(Some(turn)) = p.before_send(ORIGIN, minute) else {
            panic!("the first request after the reset goes");
        };
        p.release(ORIGIN, turn);
        assert_eq!(p.before_send(ORIGIN, minute), Pace::Go(None));
        // An old turn ends nobody else's.
        p.saw(ORIGIN, headers(&[("RateLimit", r#""pow-shield";r=0;t=0"#)]));
        assert!(matches!(p.before_send(ORIGIN, minute), Pace::Go(Some(_))));
        p.release(ORIGIN, turn);
        assert_eq!(p.before_send(ORIGIN, minute), Pace::AwaitAnswer);
    }

    #[test]
    fn an_unknown_reset_never_waits() {
        let p = Pacer::default();
        p.saw(ORIGIN, headers(&[("X-RateLimit-Remaining", "0")]));
        assert_eq!(
            p.before_send(ORIGIN, Duration::from_secs(60)),
            Pace::Go(None)
        );
        assert_eq!(
            p.before_send("http://other:80", Duration::from_secs(60)),
            Pace::Go(None)
        );
    }
}

//! Pacing (`Policy::pace`): what the rate-limit headers say about when an
//! origin's limit frees up again, so that a client whose free requests ran
//! out waits for the reset instead of paying (no 429, no work).
//!
//! The numbers are the server's (docs/protocol.md §2): `RateLimit:
//! "pow-shield";r=<remaining>;t=<seconds to reset>` (the item with the
//! lowest `r`), else `X-RateLimit-Remaining` and `X-RateLimit-Reset` (epoch
//! seconds). Both round up, so once the reset has passed at least one
//! request is free again.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
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

/// Per-origin pacing state, shared by every request of a client.
#[derive(Debug, Default)]
pub(crate) struct Pacer {
    origins: Mutex<HashMap<String, Window>>,
}

impl Pacer {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Window>> {
        self.origins.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes what one answer from `origin` says (nothing when it carries
    /// no rate-limit numbers, e.g. an exempt client's).
    pub(crate) fn saw<'h>(&self, origin: &str, lookup: impl Fn(&str) -> Option<&'h str> + Copy) {
        let Some(left) = remaining(lookup) else {
            return;
        };
        let reset_at =
            reset_in(lookup, SystemTime::now()).and_then(|d| Instant::now().checked_add(d));
        self.lock().insert(
            origin.to_owned(),
            Window {
                remaining: left,
                reset_at,
            },
        );
    }

    /// How long a request about to go to `origin` should wait: until the
    /// reset when no free request is left and the reset is at most
    /// `max_wait` away; else none (and one free request is counted off).
    pub(crate) fn before_send(&self, origin: &str, max_wait: Duration) -> Option<Duration> {
        let now = Instant::now();
        let mut origins = self.lock();
        let w = origins.get_mut(origin)?;
        if w.remaining > 0 {
            w.remaining -= 1;
            return None;
        }
        match w.reset_at.map(|at| at.saturating_duration_since(now)) {
            Some(wait) if wait.is_zero() => {
                // The reset has passed: what the origin says next counts.
                origins.remove(origin);
                None
            }
            Some(wait) if wait <= max_wait => Some(wait),
            _ => None,
        }
    }

    /// Whether [`Pacer::before_send`] would wait now (then a next challenge
    /// is not worth solving).
    pub(crate) fn would_wait(&self, origin: &str, max_wait: Duration) -> bool {
        let now = Instant::now();
        self.lock().get(origin).is_some_and(|w| {
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

    #[test]
    fn no_free_request_left_waits_for_the_reset_within_max_wait() {
        let p = Pacer::default();
        p.saw(ORIGIN, headers(&[("RateLimit", r#""pow-shield";r=0;t=2"#)]));
        let wait = p.before_send(ORIGIN, Duration::from_secs(60)).unwrap();
        assert!(wait > Duration::from_secs(1) && wait <= Duration::from_secs(2));
        assert!(p.would_wait(ORIGIN, Duration::from_secs(60)));
        // Beyond max_wait the request goes (and pays).
        assert_eq!(p.before_send(ORIGIN, Duration::from_secs(1)), None);
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
        assert_eq!(p.before_send(ORIGIN, long), None);
        assert_eq!(p.before_send(ORIGIN, long), None);
        assert!(p.before_send(ORIGIN, long).is_some());
    }

    #[test]
    fn a_reset_already_past_or_unknown_never_waits() {
        let p = Pacer::default();
        p.saw(ORIGIN, headers(&[("RateLimit", r#""pow-shield";r=0;t=0"#)]));
        assert_eq!(p.before_send(ORIGIN, Duration::from_secs(60)), None);
        p.saw(ORIGIN, headers(&[("X-RateLimit-Remaining", "0")]));
        assert_eq!(p.before_send(ORIGIN, Duration::from_secs(60)), None);
        assert_eq!(
            p.before_send("http://other:80", Duration::from_secs(60)),
            None
        );
    }
}

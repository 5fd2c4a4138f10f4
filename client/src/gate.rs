//! The per-origin in-flight gate: how many requests a client has on the
//! wire to one origin (scheme, host, port) at a time.
//!
//! The server's breaker blocks a client at its `n + 1`-th unpaid 429
//! (SPEC §5, `n` = 5 by default); a request in flight over the limit holds
//! at most one unpaid 429 until it pays. So a client never has more than
//! `n - 1` requests in flight while it may be over the limit: the gate
//! starts at [`DEFAULT_IN_FLIGHT`] (4), before the first response too, and
//! opens as far as the server's `Remaining` shows room (that many requests
//! pass unchallenged), closing back on a 429 or `Remaining: 0`.
//!
//! A [`Pass`] is held for the whole of one request: its sends, solves and
//! `Retry-After` waits. [`Gate::enter`] blocks a thread;
//! `Gate::enter_async` (feature `reqwest`) awaits.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// Requests in flight per origin while over the limit: `n - 1` for the
/// server's default `pow_shield_strikes 5`.
pub const DEFAULT_IN_FLIGHT: usize = 4;

/// The IETF draft's field: `"pow-shield";r=<remaining>;t=<seconds>`.
const HEADER_RATELIMIT: &str = "RateLimit";
const HEADER_REMAINING: &str = "X-RateLimit-Remaining";

/// One origin's count.
#[derive(Debug, Default)]
struct Origin {
    in_flight: usize,
    /// How many may be in flight now: at least the floor.
    allowed: usize,
    /// Sends started so far (each one's ticket).
    sent: u64,
    /// The ticket of the send whose `Remaining` set `allowed` last.
    applied: u64,
}

/// Per-origin limits on requests in flight, shared by every request of one
/// client (clone the `Arc`).
#[derive(Debug)]
pub struct Gate {
    floor: usize,
    origins: Mutex<HashMap<String, Origin>>,
    freed: Condvar,
    #[cfg(feature = "reqwest")]
    notify: tokio::sync::Notify,
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new(DEFAULT_IN_FLIGHT)
    }
}

impl Gate {
    /// A gate that lets `floor` requests (at least 1) be in flight per
    /// origin while the client may be over the limit.
    pub fn new(floor: usize) -> Gate {
        Gate {
            floor: floor.max(1),
            origins: Mutex::new(HashMap::new()),
            freed: Condvar::new(),
            #[cfg(feature = "reqwest")]
            notify: tokio::sync::Notify::new(),
        }
    }

    /// Requests in flight per origin before any `Remaining` opens it.
    pub fn floor(&self) -> usize {
        self.floor
    }

    /// Requests in flight to `url`'s origin now.
    pub fn in_flight(&self, url: &str) -> usize {
        self.lock().get(&origin(url)).map_or(0, |o| o.in_flight)
    }

    /// How many may be in flight to `url`'s origin now.
    pub fn allowed(&self, url: &str) -> usize {
        self.lock()
            .get(&origin(url))
            .map_or(self.floor, |o| o.allowed)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Origin>> {
        self.origins.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(any(test, feature = "reqwest"))]
    fn try_enter(self: &Arc<Self>, origin: &str) -> Option<Pass> {
        self.admit(&mut self.lock(), origin)
    }

    fn admit(
        self: &Arc<Self>,
        origins: &mut HashMap<String, Origin>,
        origin: &str,
    ) -> Option<Pass> {
        let o = origins.entry(origin.to_owned()).or_insert_with(|| Origin {
            allowed: self.floor,
            ..Origin::default()
        });
        if o.in_flight >= o.allowed {
            return None;
        }
        o.in_flight += 1;
        o.sent += 1;
        Some(Pass {
            gate: Arc::clone(self),
            origin: origin.to_owned(),
            ticket: o.sent,
        })
    }

    /// Waits (blocking the thread) until a request to `url`'s origin may
    /// be sent.
    pub fn enter(self: &Arc<Self>, url: &str) -> Pass {
        let origin = origin(url);
        let mut origins = self.lock();
        loop {
            if let Some(pass) = self.admit(&mut origins, &origin) {
                return pass;
            }
            origins = self
                .freed
                .wait(origins)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Waits (without blocking the executor) until a request to `url`'s
    /// origin may be sent; dropping the future gives up its place.
    #[cfg(feature = "reqwest")]
    pub async fn enter_async(self: &Arc<Self>, url: &str) -> Pass {
        let origin = origin(url);
        loop {
            let mut notified = std::pin::pin!(self.notify.notified());
            notified.as_mut().enable();
            if let Some(pass) = self.try_enter(&origin) {
                return pass;
            }
            notified.await;
        }
    }

    fn wake(&self) {
        self.freed.notify_all();
        #[cfg(feature = "reqwest")]
        self.notify.notify_waiters();
    }
}

/// The right to have one request in flight; given back when dropped.
#[derive(Debug)]
pub struct Pass {
    gate: Arc<Gate>,
    origin: String,
    ticket: u64,
}

impl Pass {
    /// Call before each resend of the request (after a solve or a wait):
    /// the next answer is then the newest the origin has seen.
    pub fn resending(&mut self) {
        let mut origins = self.gate.lock();
        if let Some(o) = origins.get_mut(&self.origin) {
            o.sent += 1;
            self.ticket = o.sent;
        }
    }

    /// What one answer says about room: a 429 or `remaining` 0 closes the
    /// gate to its floor; a lower `remaining` always applies, a higher one
    /// only from the newest send (an older answer may be stale).
    pub fn saw(&self, status: u16, remaining: Option<u64>) {
        let floor = self.gate.floor;
        let mut origins = self.gate.lock();
        let Some(o) = origins.get_mut(&self.origin) else {
            return;
        };
        let before = o.allowed;
        let room = match remaining {
            _ if status == 429 => floor,
            Some(r) => usize::try_from(r).unwrap_or(usize::MAX).max(floor),
            None => return,
        };
        if room <= o.allowed || self.ticket >= o.applied {
            o.allowed = room;
            o.applied = o.applied.max(self.ticket);
        }
        let opened = o.allowed > before;
        drop(origins);
        if opened {
            self.gate.wake();
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        let mut origins = self.gate.lock();
        if let Some(o) = origins.get_mut(&self.origin) {
            o.in_flight = o.in_flight.saturating_sub(1);
        }
        drop(origins);
        self.gate.wake();
    }
}

/// `scheme://host:port` of `url`, lower-case, the default port spelled
/// out; a URL without `://` is its own origin.
pub fn origin(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_ascii_lowercase();
    };
    let scheme = scheme.to_ascii_lowercase();
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host_port = host_port.to_ascii_lowercase();
    // The port is after the last ':' outside an IPv6 literal's brackets.
    let has_port = match host_port.rfind(':') {
        Some(at) => !host_port[at..].contains(']'),
        None => false,
    };
    if has_port {
        format!("{scheme}://{host_port}")
    } else {
        let port = if scheme == "https" { 443 } else { 80 };
        format!("{scheme}://{host_port}:{port}")
    }
}

/// The requests left unchallenged that an answer's headers show: the
/// lowest `r=` of its `RateLimit` field (one item per policy), else
/// `X-RateLimit-Remaining`.
pub fn remaining<'h>(lookup: impl Fn(&str) -> Option<&'h str>) -> Option<u64> {
    let ietf = lookup(HEADER_RATELIMIT).and_then(|v| {
        v.split(',')
            .filter_map(|item| {
                item.split(';')
                    .skip(1)
                    .filter_map(|p| p.trim().strip_prefix("r="))
                    .find_map(|r| r.trim().parse::<u64>().ok())
            })
            .min()
    });
    ietf.or_else(|| lookup(HEADER_REMAINING).and_then(|v| v.trim().parse::<u64>().ok()))
}

#[cfg(test)]
mod tests;

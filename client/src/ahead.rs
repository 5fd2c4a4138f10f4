//! Paying ahead (SPEC §4, "Paying ahead"): the next challenge a response
//! carries (`X-PoW-Next-Challenge`) is solved while the response is read,
//! and the solution goes with the next request to that origin, so that a
//! client that pays every request makes one round trip per request and
//! never meets a 429.
//!
//! [`Ahead`] holds, per origin (scheme, host, port: [`crate::gate::origin`]),
//! a small pool of solutions, one per next challenge received, each used
//! once: taken for a request, dropped after it is sent (the response to a
//! paid request carries the following one). A solution within 2 s of its
//! `exp` (its lifetime `exp - ts` counted from its arrival, by the
//! monotonic clock) is dropped unsent. It also keeps the pacing state
//! ([`crate::Policy::pace`]).
//!
//! Every entry point shares it: [`crate::blocking::Client`] (and so the
//! CLI, across `--next` runs) and the reqwest middleware; give one to
//! several clients with `Client::with_ahead` / `PowShield::with_ahead`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use pow_shield_protocol::{hex_digits_for_bits, read_unverified, wire, Work, MAX_BITS};

use crate::gate::origin;
use crate::pace::{Pace, Pacer};
use crate::{solve_work_until, Policy, Proof};

/// Solutions kept per origin: one per request in flight is enough (the
/// gate lets 4 through over the limit); more would be work nobody sends.
pub const POOL_SIZE: usize = 8;

/// A solution this close to its `exp` is not sent: it would arrive late.
const EXPIRY_MARGIN: Duration = Duration::from_secs(2);

/// A next challenge, as a response announces it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NextChallenge {
    /// The signed token, sent back as `X-PoW-Challenge`.
    pub token: String,
    /// The salt the nonce is appended to (from the token's payload).
    pub salt: String,
    /// Leading zero bits required.
    pub bits: u8,
    /// What pays it (the token's `alg`).
    pub work: Work,
    /// The token's `exp`, epoch milliseconds, when it has one.
    pub expires_at_ms: Option<u64>,
    /// How long the token is valid from the moment it arrived, `exp - ts`
    /// (both the server's clock): `None` without `exp`.
    pub lifetime: Option<Duration>,
}

/// Reads `X-PoW-Next-Challenge` (with `X-PoW-Next-Bits`, else
/// `X-PoW-Next-Difficulty`, when they ask more than the token): `None`
/// when absent or unusable (a token that cannot go back in a header, an
/// unreadable payload, a price beyond the protocol's).
pub fn read_next<'h>(header: impl Fn(&str) -> Option<&'h str>) -> Option<NextChallenge> {
    let token = header(wire::HEADER_NEXT_CHALLENGE)?.trim();
    let sendable = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    if token.is_empty() || !token.bytes().all(sendable) {
        return None;
    }
    let info = read_unverified(token)?;
    let number = |name| header(name).and_then(|v| v.trim().parse::<u8>().ok());
    let asked = number(wire::HEADER_NEXT_BITS)
        .or_else(|| number(wire::HEADER_NEXT_DIFFICULTY).map(|d| d.saturating_mul(4)));
    let bits = info.bits.max(asked.unwrap_or(0));
    if info.salt.is_empty() || bits > MAX_BITS {
        return None;
    }
    Some(NextChallenge {
        token: token.to_owned(),
        salt: info.salt,
        bits,
        work: info.work,
        expires_at_ms: info.expires_at_ms,
        lifetime: info
            .expires_at_ms
            .map(|exp| Duration::from_millis(exp.saturating_sub(info.issued_at_ms))),
    })
}

/// Whether the answer to a request that carried a solution paid ahead
/// refused that solution without a challenge to pay instead: a 400 or 403
/// of the shield's verification (docs/protocol.md §7.2), told by its JSON
/// body (`body`: what was read of it), whose problem `type` or `error`
/// text is the shield's. An application's own 400 or 403 (or one from a
/// location the shield does not cover) is the answer, never sent again;
/// so is the breaker's block (`X-PoW-Shield`). On a refusal the client
/// sends the request again without a solution (the 429 path).
pub(crate) fn refused_ahead<'h>(
    status: u16,
    header: impl Fn(&str) -> Option<&'h str>,
    body: Option<&[u8]>,
) -> bool {
    may_be_refusal(status, header) && body.is_some_and(is_refusal_body)
}

/// What the head of a refusal of a solution paid ahead looks like: a 400
/// or 403 with neither a next challenge nor the breaker's `X-PoW-Shield`
/// (only its body tells: [`refused_ahead`]).
pub(crate) fn may_be_refusal<'h>(status: u16, header: impl Fn(&str) -> Option<&'h str>) -> bool {
    matches!(status, 400 | 403)
        && header(wire::HEADER_NEXT_CHALLENGE).is_none()
        && header(wire::HEADER_SHIELD).is_none()
}

/// Most bytes of a body read to tell a refusal: the shield's are a few
/// hundred bytes. (The reqwest middleware's: without that feature, unused.)
#[cfg_attr(not(feature = "reqwest"), allow(dead_code))]
pub(crate) const MAX_REFUSAL_BODY: u64 = 64 * 1024;

/// The `type` of the shield's own problems starts so.
const REFUSAL_TYPE: &str = "tag:pow-shield,";

/// Whether a JSON body is one of the shield's 400 or 403 refusals of a
/// solution: its problem `type`, or its `error` text for a server that
/// predates problem details.
pub(crate) fn is_refusal_body(body: &[u8]) -> bool {
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    let text = |name| doc.get(name).and_then(serde_json::Value::as_str);
    text("type").is_some_and(|t| t.starts_with(REFUSAL_TYPE))
        || text("error").is_some_and(|e| {
            wire::PROBLEMS
                .iter()
                .any(|p| matches!(p.status, 400 | 403) && p.error == e)
        })
}

/// One solution being found (or found) for a next challenge.
#[derive(Debug)]
struct Pending {
    token: String,
    /// When it is no longer worth sending, by this process's monotonic
    /// clock: arrival + (`exp` - `ts`) - [`EXPIRY_MARGIN`]; `None` without
    /// `exp`.
    deadline: Option<Instant>,
    /// `None` while solving; then the nonce, or `None` when the solve
    /// failed (too hard, out of time, stopped).
    result: Mutex<Option<Option<Proof>>>,
    done: Condvar,
    #[cfg(feature = "reqwest")]
    notify: tokio::sync::Notify,
    stop: AtomicBool,
}

impl Pending {
    fn lock(&self) -> MutexGuard<'_, Option<Option<Proof>>> {
        self.result.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn finish(&self, nonce: Option<Proof>) {
        *self.lock() = Some(nonce);
        self.done.notify_all();
        #[cfg(feature = "reqwest")]
        self.notify.notify_one();
    }

    /// Still worth sending at `now`.
    fn live(&self, now: Instant) -> bool {
        self.deadline.is_none_or(|d| now < d)
    }

    fn solution(&self, nonce: Option<Proof>) -> Option<(String, Proof)> {
        nonce
            .filter(|_| self.live(Instant::now()))
            .map(|n| (self.token.clone(), n))
    }
}

/// The search for one next challenge, to run off any event loop (a
/// thread of its own, `spawn_blocking`): [`Job::run`] solves and hands the
/// result to whoever waits for it.
#[must_use = "a job does nothing until it is run"]
pub struct Job {
    pending: Arc<Pending>,
    salt: String,
    bits: u8,
    work: Work,
    policy: Policy,
}

impl Job {
    /// Solves (on the policy's solver threads) and stores the solution.
    pub fn run(self) {
        let nonce = solve_work_until(
            &self.salt,
            self.bits,
            self.work,
            &self.policy.solve,
            &self.pending.stop,
        );
        self.pending.finish(nonce.ok());
    }

    /// Runs the job on a thread of its own.
    pub fn spawn(self) {
        // No thread to be had: the job is dropped unrun, which tells its
        // waiter there is no solution (the 429 path stays).
        let _ = std::thread::Builder::new()
            .name("pow-shield-ahead".into())
            .spawn(move || self.run());
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // Dropped unrun (no thread, a runtime shutting down): nobody must
        // wait for it forever.
        if self.pending.lock().is_none() {
            self.pending.finish(None);
        }
    }
}

/// A solution taken for one request: wait for it, send it once.
#[derive(Debug)]
pub struct Ticket {
    pending: Arc<Pending>,
}

impl Ticket {
    /// The token it solves.
    pub fn token(&self) -> &str {
        &self.pending.token
    }

    /// Waits (blocking the thread) until solved: the token and nonce to
    /// send, or `None` when the solve failed or the token expired.
    pub fn wait(self) -> Option<(String, Proof)> {
        let mut result = self.pending.lock();
        loop {
            if let Some(nonce) = *result {
                drop(result);
                return self.pending.solution(nonce);
            }
            result = self
                .pending
                .done
                .wait(result)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// [`Ticket::wait`] without blocking the executor; dropping the future
    /// stops the solve.
    #[cfg(feature = "reqwest")]
    pub async fn wait_async(self) -> Option<(String, Proof)> {
        loop {
            let done = *self.pending.lock();
            if let Some(nonce) = done {
                return self.pending.solution(nonce);
            }
            // One waiter per ticket: `notify_one` keeps its permit for it.
            self.pending.notify.notified().await;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Taken and not waited for (a dropped request): stop the search.
        self.pending.stop.store(true, Ordering::Relaxed);
    }
}

/// Per-origin solutions ahead and pacing, shared by every request of one
/// or more clients (clone the `Arc`). Dropping the last handle stops the
/// searches still running.
#[derive(Debug, Default)]
pub struct Ahead {
    pools: Mutex<HashMap<String, VecDeque<Arc<Pending>>>>,
    pub(crate) pacer: Pacer,
}

impl Ahead {
    /// An empty store.
    pub fn new() -> Ahead {
        Ahead::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, VecDeque<Arc<Pending>>>> {
        self.pools.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What a response from `url` says ahead of need: its rate-limit
    /// numbers (for pacing), and a next challenge to solve, returned as a
    /// [`Job`] for the caller to run off its event loop. No job when
    /// `policy.pay_ahead` is off, the challenge is above
    /// `max_difficulty`, or pacing will wait for the reset instead.
    pub fn saw<'h>(
        &self,
        url: &str,
        lookup: impl Fn(&str) -> Option<&'h str> + Copy,
        policy: &Policy,
    ) -> Option<Job> {
        let origin = origin(url);
        self.pacer.saw(&origin, lookup);
        if !policy.pay_ahead {
            return None;
        }
        let next = read_next(lookup)?;
        let too_hard = policy
            .solve
            .max_difficulty
            .is_some_and(|max| hex_digits_for_bits(next.bits) > max);
        if too_hard || policy.pace && self.pacer.would_wait(&origin, policy.max_wait) {
            return None;
        }
        Some(self.offer(&origin, next, policy))
    }

    fn offer(&self, origin: &str, next: NextChallenge, policy: &Policy) -> Job {
        let pending = Arc::new(Pending {
            token: next.token,
            // Judged from the moment the response arrived (now), never by
            // comparing `exp` with this machine's wall clock.
            deadline: next.lifetime.map(|l| {
                let now = Instant::now();
                now.checked_add(l.saturating_sub(EXPIRY_MARGIN))
                    .unwrap_or(now)
            }),
            result: Mutex::new(None),
            done: Condvar::new(),
            #[cfg(feature = "reqwest")]
            notify: tokio::sync::Notify::new(),
            stop: AtomicBool::new(false),
        });
        let mut pools = self.lock();
        let pool = pools.entry(origin.to_owned()).or_default();
        pool.push_back(Arc::clone(&pending));
        while pool.len() > POOL_SIZE {
            if let Some(old) = pool.pop_front() {
                old.stop.store(true, Ordering::Relaxed);
            }
        }
        drop(pools);
        let mut policy = policy.clone();
        // In the background: a progress line would land amid the output.
        policy.solve.progress = false;
        Job {
            pending,
            salt: next.salt,
            bits: next.bits,
            work: next.work,
            policy,
        }
    }

    /// A solution for the next request to `url`'s origin, if one is held:
    /// a solved one first, else the oldest being solved. Expired and
    /// failed ones are dropped on the way.
    pub fn take(&self, url: &str) -> Option<Ticket> {
        let now = Instant::now();
        let mut pools = self.lock();
        let pool = pools.get_mut(&origin(url))?;
        pool.retain(|p| {
            let keep = p.live(now) && *p.lock() != Some(None);
            if !keep {
                p.stop.store(true, Ordering::Relaxed);
            }
            keep
        });
        let at = pool.iter().position(|p| p.lock().is_some()).unwrap_or(0);
        let pending = pool.remove(at)?;
        Some(Ticket { pending })
    }

    /// Solutions held for `url`'s origin (solved or being solved).
    pub fn held(&self, url: &str) -> usize {
        self.lock().get(&origin(url)).map_or(0, VecDeque::len)
    }

    /// Paces a request about to go to `url` under `policy.pace` (nothing
    /// without it), blocking the thread: sleeps until the reset when the
    /// origin said no free request is left (at most `policy.max_wait`
    /// away), `slept` told of each sleep; once the reset has passed, one
    /// request goes and the others wait for its answer. Hold the turn
    /// until the request's answer has been seen ([`Ahead::saw`]).
    pub fn pace(
        &self,
        url: &str,
        policy: &Policy,
        mut slept: impl FnMut(Duration),
    ) -> PaceTurn<'_> {
        let origin = origin(url);
        if policy.pace {
            loop {
                match self.pacer.before_send(&origin, policy.max_wait) {
                    Pace::Go(turn) => return self.turn(origin, turn),
                    Pace::Sleep(wait) => {
                        slept(wait);
                        std::thread::sleep(wait);
                    }
                    Pace::AwaitAnswer => self.pacer.await_answer(&origin, policy.max_wait),
                }
            }
        }
        self.turn(origin, None)
    }

    /// [`Ahead::pace`] for async code: sleeps and waits without blocking
    /// the executor.
    #[cfg(feature = "reqwest")]
    pub async fn pace_async(&self, url: &str, policy: &Policy) -> PaceTurn<'_> {
        let origin = origin(url);
        if policy.pace {
            loop {
                match self.pacer.before_send(&origin, policy.max_wait) {
                    Pace::Go(turn) => return self.turn(origin, turn),
                    Pace::Sleep(wait) => tokio::time::sleep(wait).await,
                    Pace::AwaitAnswer => {
                        self.pacer
                            .await_answer_async(&origin, policy.max_wait)
                            .await
                    }
                }
            }
        }
        self.turn(origin, None)
    }

    fn turn(&self, origin: String, turn: Option<u64>) -> PaceTurn<'_> {
        PaceTurn {
            ahead: self,
            origin,
            turn,
        }
    }
}

/// A request's place in its origin's pacing ([`Ahead::pace`]): when it is
/// the one sent after a reset, dropping it (its answer seen, or none to be
/// had) lets the requests held back for that answer go on.
#[derive(Debug)]
#[must_use = "dropping the turn at once lets the requests held back go"]
pub struct PaceTurn<'a> {
    ahead: &'a Ahead,
    origin: String,
    turn: Option<u64>,
}

impl Drop for PaceTurn<'_> {
    fn drop(&mut self) {
        if let Some(turn) = self.turn {
            self.ahead.pacer.release(&self.origin, turn);
        }
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        for pool in self.lock().values() {
            for p in pool {
                p.stop.store(true, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests;

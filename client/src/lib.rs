//! Client side of pow-shield: pay an API's proof-of-work challenges.
//!
//! - [`solve`]: the solver, on every core, at the SHA-256 compression level;
//! - [`read_answer`] and [`Retrier`]: what a response means and what to do
//!   next (solve, wait, give up), shared by the CLI and the middleware;
//! - [`blocking`]: a small HTTP client that pays its way (the `pow-shield`
//!   CLI is built on it);
//! - `middleware` (feature `reqwest`): a `reqwest-middleware` layer that
//!   solves and retries transparently;
//! - [`gate`]: the per-origin limit on requests in flight that both keep
//!   (4, `n - 1` for the server's default 5 strikes, until `Remaining`
//!   shows room), so that a caller's many concurrent requests over the
//!   limit are paid, never blocked;
//! - [`ahead`]: the per-origin solutions paid ahead (a response's
//!   `X-PoW-Next-Challenge`, solved while it is read and sent with the next
//!   request: one round trip per paid request) and the pacing state
//!   ([`Policy::pace`]), shared by every entry point.
//!
//! Every solve is bounded by default: [`SolveOptions::default`] (and so
//! [`Policy::default`], the CLI and the middleware) gives up on one
//! challenge after [`DEFAULT_MAX_SOLVE_TIME`] (30 s) with
//! [`Error::Timeout`], since a client cannot check a challenge's signature
//! and a hostile server could ask for months of work; `max_solve_time:
//! None` removes the limit.
//!
//! ```no_run
//! use pow_shield_client::{solve, SolveOptions};
//! let nonce = solve("00112233445566778899aabbccddeeff", 4, &SolveOptions::default())?;
//! println!("X-PoW-Nonce: {nonce}");
//! # Ok::<(), pow_shield_client::Error>(())
//! ```

use std::time::Duration;

pub mod ahead;
// `pow-shield asn-geo`: an IP-to-AS table as an nginx `geo` include.
pub mod asn_geo;
pub mod blocking;
mod bot;
mod challenge;
pub mod gate;
// Public only for the fuzz target (fuzz/fuzz_targets/client_answer.rs).
#[doc(hidden)]
pub mod http_date;
#[cfg(feature = "reqwest")]
pub mod middleware;
mod pace;
mod retry;
mod solver;

pub use bot::{BotSigner, SigningKey};
pub use challenge::{read_answer, Answer, Challenge};
pub use pow_shield_protocol::wire;
pub use pow_shield_protocol::Work;
pub use retry::{Policy, Retrier, Step};
pub use solver::{
    can_solve, engine_name, hash_rate, measure, solve, solve_bits, solve_bits_until, solve_until,
    solve_work_until, Nonce, Proof, Rate, SolveOptions, DEFAULT_MAX_SOLVE_TIME,
};

/// Why a request could not be paid through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The challenge asks for more than `max_difficulty`; nothing was solved.
    #[error("challenge difficulty {difficulty} is above the limit of {max} (max difficulty)")]
    TooHard {
        /// The challenge's difficulty.
        difficulty: u8,
        /// The configured limit.
        max: u8,
    },
    /// No solution within `max_solve_time` (30 s by default,
    /// [`DEFAULT_MAX_SOLVE_TIME`]); the CLI exits 93.
    #[error("no solution for difficulty {difficulty} within {after:.1?} (max solve time)")]
    Timeout {
        /// The challenge's difficulty.
        difficulty: u8,
        /// How long the solver ran.
        after: Duration,
    },
    /// The caller stopped the solve ([`solve_until`]), e.g. because the
    /// request that needed it was dropped.
    #[error("the solve was cancelled")]
    Cancelled,
    /// The difficulty cannot be met (a digest has 64 hex digits).
    #[error("difficulty {difficulty} cannot be met")]
    Unsolvable {
        /// The challenge's difficulty.
        difficulty: u8,
    },
    /// The server's circuit breaker refuses this client for now
    /// (`X-PoW-Shield: blocked`); paying does not help, waiting does.
    #[error("blocked by the server's circuit breaker (HTTP {status}, X-PoW-Shield: blocked): too many requests, try again later")]
    Blocked {
        /// The response's status.
        status: u16,
    },
    /// The server banned this client (`X-PoW-Shield: banned`).
    #[error("banned by the server (HTTP {status}, X-PoW-Shield: banned)")]
    Banned {
        /// The response's status.
        status: u16,
    },
    /// The challenge asks for a proof of work this build cannot make
    /// (Equi-X without the `equix` feature): nothing was searched.
    #[error("the server asks for {algorithm} proof of work, which this client cannot solve (built without the \"equix\" feature)")]
    UnsupportedWork {
        /// The algorithm's name (`equix`).
        algorithm: String,
    },
    /// A challenge response that could not be read.
    #[error("unreadable challenge: {0}")]
    BadChallenge(String),
    /// Still challenged after the allowed number of retries.
    #[error("still challenged after {attempts} retries")]
    GaveUp {
        /// Retries made.
        attempts: u32,
    },
    /// The server closed the connection without answering (e.g. nginx's
    /// 444, a blocked client under `pow_shield_block_status 444`).
    #[error("the server closed the connection without a response")]
    Closed,
    /// A connect or transfer time limit ran out (`blocking::Timeouts`).
    #[error("timed out: {0}")]
    TimedOut(String),
    /// The host name did not resolve (curl's exit 6).
    #[error("could not resolve host: {0}")]
    Resolve(String),
    /// Could not connect.
    #[error("could not connect: {0}")]
    Connect(String),
    /// The server's TLS certificate was not accepted: not signed by a
    /// trusted CA, expired, or not for this host name.
    #[error("the server's TLS certificate could not be verified: {0}")]
    Certificate(String),
    /// The TLS handshake failed for another reason (e.g. not a TLS server).
    #[error("TLS handshake failed: {0}")]
    Tls(String),
    /// The CA certificates to trust could not be read.
    #[error("CA certificates: {0}")]
    CaCert(String),
    /// The URL or request could not be used.
    #[error("bad request: {0}")]
    Request(String),
    /// Any other transport failure.
    #[error("HTTP transport: {0}")]
    Transport(String),
}

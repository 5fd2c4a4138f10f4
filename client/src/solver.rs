//! The proof-of-work search on every core: find a decimal nonce such that
//! `SHA-256(salt ++ nonce)` starts with `bits` zero bits (a challenge's
//! `bits`; `4 × difficulty` for one priced in hex digits).
//!
//! Each thread takes chunks of nonces and searches them with the protocol
//! crate's [`Search`]: SHA-NI with interleaved lanes where the CPU has it
//! (detected at run time), `sha2`'s compression elsewhere; every candidate
//! is confirmed by the plain SHA-256 before it is returned.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use pow_shield_protocol::{hex_digits_for_bits, Engine, Search};

use crate::Error;

/// Nonces a thread takes at a time: about a millisecond of work, so the
/// stop flag is seen quickly and the shared counter is rarely touched.
const CHUNK: u64 = 1 << 15;

/// Hardest difficulty that can be met at all: 64 hex digits in a digest.
const MAX_POSSIBLE: u8 = 64;

/// The price [`hash_rate`] measures with: never met in practice, and within
/// what the fast engines check.
const RATE_BITS: u8 = 64;

/// Progress is shown only for solves that take longer than this.
const PROGRESS_AFTER: Duration = Duration::from_millis(500);

/// How long one challenge is solved for by default before giving up with
/// [`Error::Timeout`]: the client cannot check a challenge's signature, so a
/// hostile server could otherwise send a forged difficulty 12 (months of
/// work on every core) and repeat it on every retry. Honest challenges of
/// the protocol's usual difficulties (4 to 6) take milliseconds to a second.
pub const DEFAULT_MAX_SOLVE_TIME: Duration = Duration::from_secs(30);

/// A solution: send it as `X-PoW-Nonce` in decimal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Nonce(pub u64);

impl std::fmt::Display for Nonce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How to solve, and when to refuse.
///
/// The default: one thread per core, no difficulty limit beyond the
/// protocol's 12, [`DEFAULT_MAX_SOLVE_TIME`] (30 s) per challenge, no
/// progress line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SolveOptions {
    /// Worker threads; 0 means one per available core.
    pub threads: usize,
    /// Refuse challenges harder than this ([`Error::TooHard`]) before any work.
    pub max_difficulty: Option<u8>,
    /// Give up on one challenge after this long ([`Error::Timeout`]);
    /// [`DEFAULT_MAX_SOLVE_TIME`] (30 s) by default, `None` for no limit.
    pub max_solve_time: Option<Duration>,
    /// Show a progress line with the hash rate on stderr, when stderr is a
    /// terminal and the solve takes longer than half a second.
    pub progress: bool,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions {
            threads: 0,
            max_difficulty: None,
            max_solve_time: Some(DEFAULT_MAX_SOLVE_TIME),
            progress: false,
        }
    }
}

impl SolveOptions {
    /// The worker count this will use.
    pub fn thread_count(&self) -> usize {
        if self.threads > 0 {
            self.threads
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }
}

/// Finds a nonce for `salt` at `difficulty` hex digits (`4 × difficulty`
/// bits) with every configured thread; all threads stop at the first solution.
pub fn solve(salt: &str, difficulty: u8, opts: &SolveOptions) -> Result<Nonce, Error> {
    solve_until(salt, difficulty, opts, &AtomicBool::new(false))
}

/// [`solve`], also stopped from outside: once `stop` is set, every thread
/// ends within a chunk of work and this returns [`Error::Cancelled`] (a
/// dropped request need not keep the cores busy until a solution).
pub fn solve_until(
    salt: &str,
    difficulty: u8,
    opts: &SolveOptions,
    stop: &AtomicBool,
) -> Result<Nonce, Error> {
    check_max(difficulty, opts)?;
    if difficulty > MAX_POSSIBLE {
        return Err(Error::Unsolvable { difficulty });
    }
    // 64 hex digits are 256 bits: 255 is the same price in practice.
    let bits = u8::try_from(4 * u16::from(difficulty)).unwrap_or(u8::MAX);
    solve_bits_until(salt, bits, opts, stop)
}

/// Finds a nonce whose hash with `salt` starts with `bits` zero bits (a
/// challenge's `bits`) with every configured thread.
pub fn solve_bits(salt: &str, bits: u8, opts: &SolveOptions) -> Result<Nonce, Error> {
    solve_bits_until(salt, bits, opts, &AtomicBool::new(false))
}

/// [`solve_bits`], also stopped from outside (see [`solve_until`]).
/// `max_difficulty` is in hex digits: a price above `4 × max` bits is
/// refused. Errors name the difficulty in hex digits, `⌈bits / 4⌉`.
pub fn solve_bits_until(
    salt: &str,
    bits: u8,
    opts: &SolveOptions,
    stop: &AtomicBool,
) -> Result<Nonce, Error> {
    let difficulty = hex_digits_for_bits(bits);
    check_max(difficulty, opts)?;
    // A limit too far away to be an Instant is no limit.
    let deadline = opts
        .max_solve_time
        .and_then(|t| Instant::now().checked_add(t));
    let progress = opts.progress && std::io::stderr().is_terminal();
    let run = search(
        salt.as_bytes(),
        bits,
        opts.thread_count(),
        deadline,
        progress,
        stop,
    );
    match run.nonce {
        Some(nonce) => Ok(Nonce(nonce)),
        None if run.exhausted => Err(Error::Unsolvable { difficulty }),
        None if stop.load(Ordering::Relaxed) => Err(Error::Cancelled),
        None => Err(Error::Timeout {
            difficulty,
            after: run.elapsed,
        }),
    }
}

fn check_max(difficulty: u8, opts: &SolveOptions) -> Result<(), Error> {
    match opts.max_difficulty {
        Some(max) if difficulty > max => Err(Error::TooHard { difficulty, max }),
        _ => Ok(()),
    }
}

/// Hashes per second with `threads` workers, measured for `duration` on a
/// challenge-like 32-character salt.
pub fn hash_rate(threads: usize, duration: Duration) -> f64 {
    measure(threads, duration).per_second()
}

/// What [`measure`] saw.
#[derive(Clone, Copy, Debug)]
pub struct Rate {
    /// Nonces tried.
    pub hashes: u64,
    /// Wall-clock time.
    pub elapsed: Duration,
    /// CPU time the process used meanwhile (user and system), where the
    /// platform tells it.
    pub cpu: Option<Duration>,
}

impl Rate {
    /// Hashes per wall-clock second.
    pub fn per_second(&self) -> f64 {
        self.hashes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Hashes per CPU second: the rate of one core however busy the
    /// machine is (as `openssl speed` counts, in CPU time).
    pub fn per_cpu_second(&self) -> Option<f64> {
        self.cpu
            .map(|cpu| self.hashes as f64 / cpu.as_secs_f64().max(1e-9))
    }
}

/// Runs the solver with `threads` workers for `duration` on a
/// challenge-like 32-character salt at a price it never meets.
pub fn measure(threads: usize, duration: Duration) -> Rate {
    let salt = b"00112233445566778899aabbccddeeff";
    let cpu_before = process_cpu_time();
    let run = search(
        salt,
        RATE_BITS,
        threads.max(1),
        Instant::now().checked_add(duration),
        false,
        &AtomicBool::new(false),
    );
    let cpu = process_cpu_time()
        .zip(cpu_before)
        .and_then(|(after, before)| after.checked_sub(before));
    Rate {
        hashes: run.hashes,
        elapsed: run.elapsed,
        cpu,
    }
}

/// The CPU time this process has used so far.
#[cfg(unix)]
fn process_cpu_time() -> Option<Duration> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes the whole struct when it returns 0.
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return None;
        }
        usage.assume_init()
    };
    let time = |t: libc::timeval| -> Option<Duration> {
        let micros = u32::try_from(t.tv_usec).ok()?;
        Some(Duration::new(
            u64::try_from(t.tv_sec).ok()?,
            micros.checked_mul(1000)?,
        ))
    };
    Some(time(usage.ru_utime)? + time(usage.ru_stime)?)
}

#[cfg(not(unix))]
fn process_cpu_time() -> Option<Duration> {
    None
}

/// The engine the solver runs on this machine, e.g. `sha-ni (2 lanes)`;
/// `POW_SHIELD_SOLVER=portable` forces the portable one.
pub fn engine_name() -> String {
    Engine::detect().label()
}

/// What one search did.
struct Run {
    nonce: Option<u64>,
    /// The whole nonce space was tried.
    exhausted: bool,
    hashes: u64,
    elapsed: Duration,
}

/// State shared by the workers of one search.
struct Shared<'a> {
    next: AtomicU64,
    stop: AtomicBool,
    /// The caller's stop flag ([`solve_until`]).
    cancel: &'a AtomicBool,
    found: AtomicU64,
    hashes: AtomicU64,
    exhausted: AtomicBool,
}

fn search(
    salt: &[u8],
    bits: u8,
    threads: usize,
    deadline: Option<Instant>,
    progress: bool,
    cancel: &AtomicBool,
) -> Run {
    let start = Instant::now();
    let prefix = Search::new(salt, u32::from(bits));
    let shared = Shared {
        next: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        cancel,
        found: AtomicU64::new(u64::MAX),
        hashes: AtomicU64::new(0),
        exhausted: AtomicBool::new(false),
    };
    let mut shown = false;
    std::thread::scope(|scope| {
        let (done_tx, done_rx) = mpsc::channel::<()>();
        for _ in 0..threads.max(1) {
            let done = done_tx.clone();
            let (prefix, shared) = (&prefix, &shared);
            scope.spawn(move || {
                worker(prefix, shared);
                let _ = done.send(());
            });
        }
        drop(done_tx);
        let mut running = threads.max(1);
        while running > 0 {
            match done_rx.recv_timeout(Duration::from_millis(100)) {
                Ok(()) => running -= 1,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                shared.stop.store(true, Ordering::Relaxed);
            }
            let elapsed = start.elapsed();
            if progress && elapsed >= PROGRESS_AFTER && !shared.stop.load(Ordering::Relaxed) {
                show_progress(bits, shared.hashes.load(Ordering::Relaxed), elapsed);
                shown = true;
            }
        }
    });
    if shown {
        // Clear the progress line.
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
    let found = shared.found.load(Ordering::Relaxed);
    Run {
        nonce: (found != u64::MAX).then_some(found),
        exhausted: shared.exhausted.load(Ordering::Relaxed),
        hashes: shared.hashes.load(Ordering::Relaxed),
        elapsed: start.elapsed(),
    }
}

fn show_progress(bits: u8, hashes: u64, elapsed: Duration) {
    let rate = hashes as f64 / elapsed.as_secs_f64();
    let expected = 2f64.powi(i32::from(bits));
    let _ = write!(
        std::io::stderr(),
        "\r\x1b[Ksolving {bits} bits: {:.1} M hashes ({:.0}% of the expected {:.1} M), {:.1} MH/s, {:.1} s",
        hashes as f64 / 1e6,
        100.0 * hashes as f64 / expected,
        expected / 1e6,
        rate / 1e6,
        elapsed.as_secs_f64()
    );
}

/// Takes chunks of nonces until one meets the price, another thread
/// found one, or time is up.
fn worker(prefix: &Search, shared: &Shared) {
    while !shared.stop.load(Ordering::Relaxed) && !shared.cancel.load(Ordering::Relaxed) {
        let start = shared.next.fetch_add(CHUNK, Ordering::Relaxed);
        let Some(end) = start.checked_add(CHUNK) else {
            shared.exhausted.store(true, Ordering::Relaxed);
            shared.stop.store(true, Ordering::Relaxed);
            return;
        };
        let found = prefix.run(start, end);
        shared.hashes.fetch_add(CHUNK, Ordering::Relaxed);
        if let Some(nonce) = found {
            shared.found.fetch_min(nonce, Ordering::Relaxed);
            shared.stop.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests;
mod work;

pub use work::{can_solve, solve_work_until, Proof};

//! The proof-of-work search: find a decimal nonce such that
//! `hex(SHA-256(salt ++ nonce))` starts with `difficulty` zeros.
//!
//! Works at the compression-function level: the salt's full 64-byte blocks
//! are compressed once, and the last block (rest of the salt, the nonce's
//! digits, SHA-256 padding) is prepared once per run of equal-length
//! nonces; each attempt then increments the ASCII digits in place and runs
//! one `compress256` (SHA-NI where the CPU has it). A salt whose tail leaves
//! no room for the digits in one block falls back to the generic hasher.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sha2::digest::generic_array::GenericArray;
use sha2::{compress256, Digest, Sha256};

use crate::Error;

/// SHA-256's initial state (FIPS 180-4 §5.3.3).
const IV: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// Nonces a thread takes at a time: about a millisecond of work, so the
/// stop flag is seen quickly and the shared counter is rarely touched.
const CHUNK: u64 = 1 << 15;

/// Longest message that fits one block with SHA-256's padding (0x80 and
/// the 8-byte length).
const ONE_BLOCK_ROOM: usize = 55;

/// Hardest difficulty that can be met at all: 64 hex digits in a digest.
const MAX_POSSIBLE: u8 = 64;

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

/// Finds a nonce for `salt` at `difficulty` with every configured thread;
/// all threads stop at the first solution.
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
    if let Some(max) = opts.max_difficulty {
        if difficulty > max {
            return Err(Error::TooHard { difficulty, max });
        }
    }
    if difficulty > MAX_POSSIBLE {
        return Err(Error::Unsolvable { difficulty });
    }
    // A limit too far away to be an Instant is no limit.
    let deadline = opts
        .max_solve_time
        .and_then(|t| Instant::now().checked_add(t));
    let progress = opts.progress && std::io::stderr().is_terminal();
    let run = search(
        salt.as_bytes(),
        difficulty,
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

/// Hashes per second with `threads` workers, measured for `duration` on a
/// challenge-like 32-character salt.
pub fn hash_rate(threads: usize, duration: Duration) -> f64 {
    let salt = b"00112233445566778899aabbccddeeff";
    let run = search(
        salt,
        MAX_POSSIBLE,
        threads.max(1),
        Instant::now().checked_add(duration),
        false,
        &AtomicBool::new(false),
    );
    run.hashes as f64 / run.elapsed.as_secs_f64().max(1e-9)
}

/// What one search did.
struct Run {
    nonce: Option<u64>,
    /// The whole nonce space was tried.
    exhausted: bool,
    hashes: u64,
    elapsed: Duration,
}

/// The salt with its full blocks already compressed.
struct Prefix<'a> {
    salt: &'a [u8],
    state: [u32; 8],
    tail: &'a [u8],
}

impl<'a> Prefix<'a> {
    fn new(salt: &'a [u8]) -> Prefix<'a> {
        let full = salt.len() - salt.len() % 64;
        let (blocks, tail) = salt.split_at(full);
        let mut state = IV;
        for block in blocks.chunks_exact(64) {
            compress256(&mut state, &[*GenericArray::from_slice(block)]);
        }
        Prefix { salt, state, tail }
    }
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
    difficulty: u8,
    threads: usize,
    deadline: Option<Instant>,
    progress: bool,
    cancel: &AtomicBool,
) -> Run {
    let start = Instant::now();
    let prefix = Prefix::new(salt);
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
                worker(prefix, difficulty, shared);
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
                show_progress(difficulty, shared.hashes.load(Ordering::Relaxed), elapsed);
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

fn show_progress(difficulty: u8, hashes: u64, elapsed: Duration) {
    let rate = hashes as f64 / elapsed.as_secs_f64();
    let expected = 16f64.powi(i32::from(difficulty));
    let _ = write!(
        std::io::stderr(),
        "\r\x1b[Ksolving difficulty {difficulty}: {:.1} M hashes ({:.0}% of the expected {:.1} M), {:.1} MH/s, {:.1} s",
        hashes as f64 / 1e6,
        100.0 * hashes as f64 / expected,
        expected / 1e6,
        rate / 1e6,
        elapsed.as_secs_f64()
    );
}

/// Takes chunks of nonces until one meets the difficulty, another thread
/// found one, or time is up.
fn worker(prefix: &Prefix, difficulty: u8, shared: &Shared) {
    while !shared.stop.load(Ordering::Relaxed) && !shared.cancel.load(Ordering::Relaxed) {
        let start = shared.next.fetch_add(CHUNK, Ordering::Relaxed);
        let Some(end) = start.checked_add(CHUNK) else {
            shared.exhausted.store(true, Ordering::Relaxed);
            shared.stop.store(true, Ordering::Relaxed);
            return;
        };
        let found = search_chunk(prefix, start, end, difficulty);
        shared.hashes.fetch_add(CHUNK, Ordering::Relaxed);
        if let Some(nonce) = found {
            shared.found.fetch_min(nonce, Ordering::Relaxed);
            shared.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// Searches `start..end`, split where the digit count changes.
fn search_chunk(prefix: &Prefix, start: u64, end: u64, difficulty: u8) -> Option<u64> {
    let mut from = start;
    while from < end {
        let digits = decimal_len(from);
        let to = match 10u64.checked_pow(digits as u32) {
            Some(p) => p.min(end),
            None => end,
        };
        let found = if prefix.tail.len() + digits <= ONE_BLOCK_ROOM {
            search_one_block(prefix, from, to, digits, difficulty)
        } else {
            search_generic(prefix.salt, from, to, difficulty)
        };
        if found.is_some() {
            return found;
        }
        from = to;
    }
    None
}

/// `from..to`, all with `digits` digits, one compression per nonce.
fn search_one_block(
    prefix: &Prefix,
    from: u64,
    to: u64,
    digits: usize,
    difficulty: u8,
) -> Option<u64> {
    let tail = prefix.tail.len();
    let mut block = GenericArray::default();
    block[..tail].copy_from_slice(prefix.tail);
    write_decimal(from, &mut block[tail..tail + digits]);
    block[tail + digits] = 0x80;
    let bits = (prefix.salt.len() as u64 + digits as u64) * 8;
    block[56..].copy_from_slice(&bits.to_be_bytes());
    let first_mask = first_word_mask(difficulty);
    let blocks = core::slice::from_mut(&mut block);
    for nonce in from..to {
        let mut state = prefix.state;
        compress256(&mut state, blocks);
        if state[0] & first_mask == 0 && has_leading_zero_nibbles(&state, difficulty) {
            return Some(nonce);
        }
        increment_decimal(&mut blocks[0][tail..tail + digits]);
    }
    None
}

/// The fallback for long salt tails: the generic hasher, cloned per nonce.
fn search_generic(salt: &[u8], from: u64, to: u64, difficulty: u8) -> Option<u64> {
    let mut salted = Sha256::new();
    salted.update(salt);
    (from..to).find(|nonce| {
        let digest = salted.clone().chain_update(nonce.to_string()).finalize();
        let mut words = [0u32; 8];
        for (word, bytes) in words.iter_mut().zip(digest.chunks_exact(4)) {
            *word = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        }
        has_leading_zero_nibbles(&words, difficulty)
    })
}

/// Bits of the first state word that must be zero (a quick reject).
fn first_word_mask(difficulty: u8) -> u32 {
    match difficulty {
        0 => 0,
        d if d >= 8 => u32::MAX,
        d => u32::MAX << (32 - 4 * u32::from(d)),
    }
}

/// Whether the digest (the final state, big-endian words) starts with
/// `zeros` zero nibbles.
fn has_leading_zero_nibbles(state: &[u32; 8], zeros: u8) -> bool {
    let mut bits = u32::from(zeros) * 4;
    for word in state {
        if bits >= 32 {
            if *word != 0 {
                return false;
            }
            bits -= 32;
        } else {
            return bits == 0 || word >> (32 - bits) == 0;
        }
    }
    bits == 0
}

fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |l| l as usize + 1)
}

/// Writes `n` as exactly `out.len()` decimal digits.
fn write_decimal(mut n: u64, out: &mut [u8]) {
    for slot in out.iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// Adds one to ASCII decimal digits in place (callers never overflow them).
fn increment_decimal(digits: &mut [u8]) {
    for d in digits.iter_mut().rev() {
        if *d < b'9' {
            *d += 1;
            return;
        }
        *d = b'0';
    }
}

#[cfg(test)]
mod tests;

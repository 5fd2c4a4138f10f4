//! The fast search for a nonce (docs/protocol.md §5): the smallest nonce of
//! a range whose `SHA-256(salt ++ nonce)` starts with `bits` zero bits.
//!
//! Works at the compression-function level. The salt's full 64-byte blocks
//! are compressed once (the midstate); the last block (the rest of the
//! salt, the nonce's digits, SHA-256's padding) is laid out once per run of
//! nonces with the same number of digits, and each attempt only rewrites
//! its digits. Two engines:
//!
//! - `sha-ni` (x86-64 CPUs with the SHA extensions, detected at run time):
//!   several nonces ("lanes") interleaved through the SHA-NI round
//!   instructions, so one lane's rounds fill the others' latency; the
//!   rounds over the words of the block that hold only salt (the first 8
//!   of 64 for a 32-character salt) are computed once per run, not per
//!   nonce;
//! - `portable`: one `sha2::compress256` per nonce (sha2 picks the best
//!   code it has for the CPU).
//!
//! A candidate from either engine is confirmed with the plain SHA-256 of
//! [`meets_bits`](crate::meets_bits) before it is returned, so a bug in a
//! fast path can cost time but can never hand out a wrong nonce.
//! `POW_SHIELD_SOLVER=portable` in the environment forces the portable engine.

use std::sync::OnceLock;

use sha2::digest::generic_array::GenericArray;
use sha2::{compress256, Digest, Sha256};

use crate::work::{leading_zero_bits, meets_bits_u32};

mod portable;
#[cfg(target_arch = "x86_64")]
mod shani;
#[cfg(test)]
mod tests;

/// SHA-256's initial state (FIPS 180-4 §5.3.3).
pub(crate) const IV: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// Longest message tail that fits one block with SHA-256's padding (0x80
/// and the 8-byte length).
const ONE_BLOCK_ROOM: usize = 55;

/// Most bits the engines check (the first two digest words); more is
/// searched with the generic hasher (the protocol asks at most 48).
const FAST_BITS: u32 = 64;

/// Environment variable that forces an engine: `portable` (or `sha-ni`,
/// which is ignored where the CPU lacks it).
pub const SOLVER_ENV: &str = "POW_SHIELD_SOLVER";

/// Which compression code a search runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// SHA-NI, several nonces interleaved (x86-64 only).
    ShaNi,
    /// `sha2::compress256`, one nonce at a time.
    Portable,
}

impl Engine {
    /// The fastest engine this CPU runs, unless [`SOLVER_ENV`] says
    /// `portable`. Detected once per process.
    pub fn detect() -> Engine {
        static DETECTED: OnceLock<Engine> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            let forced = std::env::var(SOLVER_ENV).ok();
            if forced.as_deref() == Some("portable") {
                Engine::Portable
            } else if Engine::ShaNi.is_available() {
                Engine::ShaNi
            } else {
                Engine::Portable
            }
        })
    }

    /// Whether this CPU can run the engine.
    pub fn is_available(self) -> bool {
        match self {
            Engine::Portable => true,
            Engine::ShaNi => shani_available(),
        }
    }

    /// A short name for `solver_info` and `bench`.
    pub fn name(self) -> &'static str {
        match self {
            Engine::ShaNi => "sha-ni",
            Engine::Portable => "portable",
        }
    }

    /// The name with its lanes, e.g. `sha-ni (4 lanes)`: what
    /// `pow-shield bench` and the Python client's `solver_info()` show.
    pub fn label(self) -> String {
        match self.lanes() {
            1 => self.name().to_owned(),
            lanes => format!("{} ({lanes} lanes)", self.name()),
        }
    }

    /// Nonces hashed side by side.
    pub fn lanes(self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Engine::ShaNi => shani::LANES,
            _ => 1,
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn shani_available() -> bool {
    std::arch::is_x86_feature_detected!("sha")
        && std::arch::is_x86_feature_detected!("sse4.1")
        && std::arch::is_x86_feature_detected!("ssse3")
}

#[cfg(not(target_arch = "x86_64"))]
fn shani_available() -> bool {
    false
}

/// One salt and price, ready to search ranges of nonces (from any number
/// of threads: it is `Sync` and holds no mutable state).
#[derive(Clone, Debug)]
pub struct Search<'a> {
    salt: &'a [u8],
    bits: u32,
    engine: Engine,
    /// The state after the salt's full blocks.
    midstate: [u32; 8],
    /// The salt's bytes after its full blocks.
    tail: &'a [u8],
}

impl<'a> Search<'a> {
    /// A search for `bits` leading zero bits with the [`Engine::detect`]ed engine.
    pub fn new(salt: &'a [u8], bits: u32) -> Search<'a> {
        Search::with_engine(salt, bits, Engine::detect())
    }

    /// A search with a chosen engine; one the CPU lacks runs the portable one.
    pub fn with_engine(salt: &'a [u8], bits: u32, engine: Engine) -> Search<'a> {
        let engine = if engine.is_available() {
            engine
        } else {
            Engine::Portable
        };
        let full = salt.len() - salt.len() % 64;
        let (blocks, tail) = salt.split_at(full);
        let mut midstate = IV;
        for block in blocks.chunks_exact(64) {
            compress256(&mut midstate, &[*GenericArray::from_slice(block)]);
        }
        Search {
            salt,
            bits,
            engine,
            midstate,
            tail,
        }
    }

    /// The engine this search runs.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// The smallest nonce in `from..to` that meets the bits, confirmed by
    /// the plain SHA-256.
    pub fn run(&self, from: u64, to: u64) -> Option<u64> {
        let mut start = from;
        while start < to {
            let digits = decimal_len(start);
            let end = 10u64.checked_pow(digits as u32).map_or(to, |p| p.min(to));
            let mut at = start;
            while let Some(found) = self.run_digits(at, end, digits) {
                let mut text = [0u8; 20];
                let text = &mut text[..digits];
                write_decimal(found, text);
                if meets_bits_u32(self.salt, text, self.bits) {
                    return Some(found);
                }
                // A fast path disagreed with SHA-256: never hand it out.
                debug_assert!(false, "engine {:?} proposed nonce {found}", self.engine);
                at = found + 1;
            }
            start = end;
        }
        None
    }

    /// `from..to`, all with `digits` digits.
    fn run_digits(&self, from: u64, to: u64, digits: usize) -> Option<u64> {
        if from >= to {
            return None;
        }
        if self.bits > FAST_BITS || self.tail.len() + digits > ONE_BLOCK_ROOM {
            return self.run_generic(from, to);
        }
        let block = self.last_block(from, digits);
        match self.engine {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: with_engine() keeps ShaNi only where the CPU has it.
            #[allow(unsafe_code)]
            Engine::ShaNi => unsafe { shani::search(self, &block, from, to) },
            _ => portable::search(self, &block, from, to),
        }
    }

    /// The last block for `nonce` (of `digits` digits): tail, digits, 0x80,
    /// zeros, the message length in bits.
    fn last_block(&self, nonce: u64, digits: usize) -> Block {
        let tail = self.tail.len();
        let mut bytes = [0u8; 64];
        bytes[..tail].copy_from_slice(self.tail);
        write_decimal(nonce, &mut bytes[tail..tail + digits]);
        bytes[tail + digits] = 0x80;
        let length = (self.salt.len() as u64 + digits as u64) * 8;
        bytes[56..].copy_from_slice(&length.to_be_bytes());
        Block {
            bytes,
            digits: tail..tail + digits,
        }
    }

    /// Long salt tails and prices beyond 64 bits: the generic hasher.
    fn run_generic(&self, from: u64, to: u64) -> Option<u64> {
        let mut salted = Sha256::new();
        salted.update(self.salt);
        let mut text = [0u8; 20];
        (from..to).find(|nonce| {
            let digits = decimal_len(*nonce);
            write_decimal(*nonce, &mut text[..digits]);
            let digest = salted.clone().chain_update(&text[..digits]).finalize();
            leading_zero_bits(&digest) >= self.bits
        })
    }
}

/// A last block and where its nonce digits are.
#[derive(Clone, Debug)]
pub(crate) struct Block {
    pub bytes: [u8; 64],
    pub digits: core::ops::Range<usize>,
}

/// Whether the first two digest words `ab` (`A << 32 | B`) start with
/// `bits` zero bits (`bits` ≤ 64).
#[inline(always)]
pub(crate) fn meets(ab: u64, bits: u32) -> bool {
    ab.leading_zeros() >= bits
}

pub(crate) fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |l| l as usize + 1)
}

/// Writes `n` as exactly `out.len()` decimal digits.
pub(crate) fn write_decimal(mut n: u64, out: &mut [u8]) {
    for slot in out.iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// Adds `k` (below 10) to ASCII decimal digits in place; callers never
/// carry out of the first digit.
#[inline(always)]
pub(crate) fn add_decimal(digits: &mut [u8], k: u8) {
    let mut carry = k;
    for d in digits.iter_mut().rev() {
        let v = *d + carry;
        if v <= b'9' {
            *d = v;
            return;
        }
        *d = v - 10;
        carry = 1;
    }
}

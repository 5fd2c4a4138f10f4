//! The Node client's nonce search (docs/protocol.md §5), built for
//! `wasm32-unknown-unknown` with SIMD: the smallest nonce of a range whose
//! `SHA-256(salt ++ decimal nonce)` starts with `bits` zero bits.
//!
//! Four nonces per `v128` (one per 32-bit lane). The salt's full 64-byte
//! blocks are compressed once (the midstate). The nonces are searched in
//! groups that share all but their last `k` digits (`k` ≤ 4): a group lays
//! out its last block once, computes once the rounds over the words that
//! hold no varying digit, and each step of four only writes its digits into
//! one or two words. A candidate is only a candidate: lib/wasm.js confirms
//! it with node:crypto's SHA-256 before it is handed out.
//!
//! The interface (lib/wasm.js): write the salt at `salt_buffer()` (at most
//! `salt_capacity()` bytes), `prepare(len, bits)` (the most nonce digits
//! that fit the last block, 0 for a salt or price it cannot take), then
//! `search(from, to)`: the nonce, -1 for none in `from..to`, -2 for a range
//! with more digits than `prepare` allowed. Nonces are f64 (exact below
//! 2^53: a search never gets near).

#![no_std]

mod lanes;
mod sha256;

use core::arch::wasm32::*;
use core::ptr::addr_of_mut;

/// The longest salt taken (the module's are 32 hex characters).
const SALT_CAPACITY: usize = 1024;
/// Longest message tail that fits one block with SHA-256's padding (0x80
/// and the 8-byte length).
const ONE_BLOCK_ROOM: usize = 55;
/// Most bits checked (the first two digest words; the protocol asks ≤ 48).
const MAX_BITS: u32 = 64;
/// Digits of the suffixes a group varies at most: the table's width.
const GROUP_DIGITS: usize = 4;
const TABLE_LEN: usize = 10_000 + 8;

struct Context {
    salt: [u8; SALT_CAPACITY],
    len: usize,
    bits: u32,
    midstate: [u32; 8],
    /// The salt's bytes after its full blocks: salt[full..len].
    full: usize,
    /// `ascii[s]`: the four decimal digits of `s % 10000`, big-endian.
    ascii: [u32; TABLE_LEN],
    ascii_ready: bool,
}

static mut CONTEXT: Context = Context {
    salt: [0; SALT_CAPACITY],
    len: 0,
    bits: 0,
    midstate: sha256::IV,
    full: 0,
    ascii: [0; TABLE_LEN],
    ascii_ready: false,
};

fn context() -> &'static mut Context {
    // SAFETY: a WebAssembly instance runs on one thread and these exports
    // are not re-entrant, so this is the only live reference to CONTEXT
    // while an export runs; none is kept between calls.
    #[allow(unsafe_code)]
    unsafe {
        &mut *addr_of_mut!(CONTEXT)
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    core::arch::wasm32::unreachable()
}

/// Where the caller writes the salt before `prepare`.
#[no_mangle]
pub extern "C" fn salt_buffer() -> *mut u8 {
    context().salt.as_mut_ptr()
}

/// The most salt bytes `salt_buffer` holds.
#[no_mangle]
pub extern "C" fn salt_capacity() -> u32 {
    SALT_CAPACITY as u32
}

/// Takes the `len` salt bytes written at `salt_buffer()` and the price:
/// the most nonce digits this search handles for that salt, 0 when it
/// handles none (a longer salt, a price of 0 or above 64 bits).
#[no_mangle]
pub extern "C" fn prepare(len: u32, bits: u32) -> u32 {
    let ctx = context();
    let len = len as usize;
    if len > SALT_CAPACITY || bits == 0 || bits > MAX_BITS {
        return 0;
    }
    if !ctx.ascii_ready {
        for (s, slot) in ctx.ascii.iter_mut().enumerate() {
            let d = |p: usize| u32::from(b'0') + ((s / p) % 10) as u32;
            *slot = (d(1000) << 24) | (d(100) << 16) | (d(10) << 8) | d(1);
        }
        ctx.ascii_ready = true;
    }
    ctx.len = len;
    ctx.bits = bits;
    ctx.full = len - len % 64;
    ctx.midstate = sha256::IV;
    for block in ctx.salt[..ctx.full].chunks_exact(64) {
        let mut b = [0u8; 64];
        b.copy_from_slice(block);
        sha256::compress(&mut ctx.midstate, &b);
    }
    ONE_BLOCK_ROOM.saturating_sub(len - ctx.full).min(20) as u32
}

/// The smallest nonce in `from..to` meeting the prepared price; -1 for
/// none, -2 when the range holds nonces too long for one block.
#[no_mangle]
pub extern "C" fn search(from: f64, to: f64) -> f64 {
    let ctx = context();
    let room = ONE_BLOCK_ROOM.saturating_sub(ctx.len - ctx.full);
    let (mut start, to) = (from as u64, to as u64);
    while start < to {
        let digits = decimal_len(start);
        if digits > room || ctx.bits == 0 {
            return -2.0;
        }
        let end = 10u64.checked_pow(digits as u32).map_or(to, |p| p.min(to));
        let k = group_digits(ctx.len - ctx.full, digits);
        let span = 10u64.pow(k as u32);
        let mut at = start;
        while at < end {
            let prefix = at / span;
            let group_end = ((prefix + 1) * span).min(end);
            let group = Group::new(ctx, digits, k, prefix);
            let lo = (at - prefix * span) as usize;
            let hi = (group_end - prefix * span) as usize;
            if let Some(s) = group.search(ctx, lo, hi) {
                return (prefix * span + s as u64) as f64;
            }
            at = group_end;
        }
        start = end;
    }
    -1.0
}

/// How many trailing digits a group varies: those of the block's last
/// word with digits in it when they are two or more, else four (spilling
/// into the word before, which costs one round more per nonce).
fn group_digits(tail: usize, digits: usize) -> usize {
    let end = tail + digits;
    let in_last_word = (end - 4 * ((end - 1) / 4)).min(digits);
    if in_last_word >= 2 {
        in_last_word
    } else {
        digits.min(GROUP_DIGITS)
    }
}

fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |l| l as usize + 1)
}

/// The nonces `prefix * 10^k + s` for `s` below `10^k`, all of `digits`
/// digits: their shared last block and rounds.
struct Group {
    /// The last block's words, the varying digits zero.
    words: [u32; 16],
    /// The first word with a varying digit: rounds before it are shared.
    first: usize,
    /// Where the digits go: `v << shift_hi` into `words[first]` when
    /// `shift_hi` is set, else split `v >> split` / `v << (32 - split)`.
    shift: u32,
    /// Keeps the `k` low bytes of an `ascii` entry.
    mask: u32,
}

impl Group {
    fn new(ctx: &Context, digits: usize, k: usize, prefix: u64) -> Group {
        let tail = ctx.len - ctx.full;
        let mut block = [0u8; 64];
        block[..tail].copy_from_slice(&ctx.salt[ctx.full..ctx.len]);
        let mut p = prefix;
        for slot in block[tail..tail + digits - k].iter_mut().rev() {
            *slot = b'0' + (p % 10) as u8;
            p /= 10;
        }
        block[tail + digits] = 0x80;
        let length = (ctx.len as u64 + digits as u64) * 8;
        block[56..].copy_from_slice(&length.to_be_bytes());
        let words = sha256::words(&block);
        let at = tail + digits - k;
        let first = at / 4;
        // The k digit bytes as a 64-bit big-endian pair of words[first..]:
        // they sit `shift` bits above the pair's lowest bit.
        let shift = ((8 - at % 4 - k) * 8) as u32;
        let mask = if k >= 4 {
            u32::MAX
        } else {
            (1u32 << (8 * k)) - 1
        };
        Group {
            words,
            first,
            shift,
            mask,
        }
    }

    /// Dispatches to rounds compiled for a start: the largest of a few
    /// (each is a copy of the unrolled rounds) at most `first`; a 32-digit
    /// salt's groups start at word 8 or 9.
    fn search(&self, ctx: &Context, lo: usize, hi: usize) -> Option<usize> {
        match self.first {
            0..=3 => self.steps::<0>(ctx, lo, hi),
            4..=7 => self.steps::<4>(ctx, lo, hi),
            8 => self.steps::<8>(ctx, lo, hi),
            9..=11 => self.steps::<9>(ctx, lo, hi),
            _ => self.steps::<12>(ctx, lo, hi),
        }
    }

    /// Writes the four lanes' digits into words `at` (and `at + 1`).
    #[inline(always)]
    fn insert(&self, w: &mut [v128; 16], at: usize, digits: v128) {
        if self.shift >= 32 {
            w[at] = v128_or(w[at], i32x4_shl(digits, self.shift - 32));
        } else {
            w[at] = v128_or(w[at], u32x4_shr(digits, 32 - self.shift));
            w[at + 1] = v128_or(w[at + 1], i32x4_shl(digits, self.shift));
        }
    }

    /// Suffixes `lo..hi`, four at a time (one per lane): the lowest one
    /// meeting the bits. Rounds `0..START` are the group's, computed once.
    fn steps<const START: usize>(&self, ctx: &Context, lo: usize, hi: usize) -> Option<usize> {
        let vars = sha256::rounds(&ctx.midstate, &self.words, START);
        let first = self.first;
        let bits = ctx.bits;
        let mask0 = if bits >= 32 {
            u32::MAX
        } else {
            !(u32::MAX >> bits)
        };
        let mask1 = if bits <= 32 {
            0
        } else {
            !(u32::MAX >> (bits - 32))
        };
        let (mask0, mask1) = (u32x4_splat(mask0), u32x4_splat(mask1));
        let (m0, m1) = (u32x4_splat(ctx.midstate[0]), u32x4_splat(ctx.midstate[1]));
        let digit_mask = u32x4_splat(self.mask);
        let mut base = [u32x4_splat(0); 16];
        for (v, w) in base.iter_mut().zip(self.words) {
            *v = u32x4_splat(w);
        }
        let t = &ctx.ascii;
        let mut s = lo;
        while s < hi {
            let digits = v128_and(u32x4(t[s], t[s + 1], t[s + 2], t[s + 3]), digit_mask);
            let mut w = base;
            // Constant indices, so that the unrolled rounds keep `w` in registers.
            match first - START {
                0 => self.insert(&mut w, START, digits),
                1 => self.insert(&mut w, START + 1, digits),
                2 => self.insert(&mut w, START + 2, digits),
                _ => self.insert(&mut w, START + 3, digits),
            }
            let (a, b) = lanes::rounds_from::<v128, START>(vars, w);
            let high = v128_or(
                v128_and(i32x4_add(a, m0), mask0),
                v128_and(i32x4_add(b, m1), mask1),
            );
            let met = i32x4_bitmask(i32x4_eq(high, u32x4_splat(0))) as u32;
            let valid = (1u32 << (hi - s).min(4)) - 1;
            if met & valid != 0 {
                return Some(s + (met & valid).trailing_zeros() as usize);
            }
            s += 4;
        }
        None
    }
}

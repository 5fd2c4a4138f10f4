//! The SHA-NI engine: [`LANES`] nonces at a time, their compressions
//! interleaved instruction by instruction so the round instructions of one
//! lane run while another's wait for their results. The rounds over the
//! block's salt-only words are done once per run (in [`Start`]), so a
//! 32-character salt costs 56 rounds a nonce instead of 64.
//!
//! Register layout as in Intel's SHA extensions paper: the state is two
//! vectors, ABEF and CDGH (lane 3 first), the message four vectors of four
//! schedule words each.
#![allow(unsafe_code)]

use core::arch::x86_64::{
    __m128i, _mm_add_epi32, _mm_alignr_epi8, _mm_extract_epi32, _mm_loadu_si128, _mm_set_epi32,
    _mm_set_epi64x, _mm_sha256msg1_epu32, _mm_sha256msg2_epu32, _mm_sha256rnds2_epu32,
    _mm_shuffle_epi32, _mm_shuffle_epi8,
};

use super::{add_decimal, meets, Block, Search};

/// Nonces per step. Measured on AMD EPYC (Zen) against 1 to 4 lanes: 1 is
/// sha2's speed (the round instructions' latency bounds it), 4 the fastest
/// (about 1.6× one lane) although its vectors no longer all fit the 16
/// registers.
pub(super) const LANES: usize = 4;

/// SHA-256's round constants (FIPS 180-4 §4.2.2).
const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// What every nonce of one run shares.
struct Start {
    /// The midstate, ABEF and CDGH: added at the end.
    mid: (__m128i, __m128i),
    /// The state after the salt-only rounds.
    after: (__m128i, __m128i),
    /// The salt-only message words (the first `groups` entries are used).
    msg: [__m128i; 4],
}

/// Searches `from..to` (same digit count, at most 64 bits asked).
///
/// # Safety
/// The CPU must have SHA, SSSE3 and SSE4.1 (`Engine::ShaNi.is_available()`).
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
pub(super) unsafe fn search(search: &Search, block: &Block, from: u64, to: u64) -> Option<u64> {
    // Groups of four message words that hold only salt (at most 3: the
    // digits are in the block).
    let groups = (block.digits.start / 16).min(3);
    match groups {
        0 => run::<0>(search, block, from, to),
        1 => run::<1>(search, block, from, to),
        2 => run::<2>(search, block, from, to),
        _ => run::<3>(search, block, from, to),
    }
}

#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
unsafe fn run<const G: usize>(search: &Search, block: &Block, from: u64, to: u64) -> Option<u64> {
    let start = prepare(search.midstate, &block.bytes, G);
    let bits = search.bits;
    let mut lanes = [block.bytes; LANES];
    for (i, lane) in lanes.iter_mut().enumerate() {
        // i < LANES < 10: the digits of from + i (no carry out: the run
        // stays within one digit count, checked below).
        if from + (i as u64) < to {
            add_decimal(&mut lane[block.digits.clone()], i as u8);
        }
    }
    let mut nonce = from;
    while to - nonce >= LANES as u64 {
        let ab = compress::<LANES, G>(&start, &lanes);
        for (i, ab) in ab.iter().enumerate() {
            if meets(*ab, bits) {
                return Some(nonce + i as u64);
            }
        }
        nonce += LANES as u64;
        if nonce < to {
            for lane in lanes.iter_mut() {
                add_decimal(&mut lane[block.digits.clone()], LANES as u8);
            }
        }
    }
    // The last few, one lane at a time.
    let mut one = [lanes[0]];
    while nonce < to {
        let ab = compress::<1, G>(&start, &one);
        if meets(ab[0], bits) {
            return Some(nonce);
        }
        nonce += 1;
        if nonce < to {
            add_decimal(&mut one[0][block.digits.clone()], 1);
        }
    }
    None
}

/// The state after the first `4 × groups` rounds, which see only salt.
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
unsafe fn prepare(mid: [u32; 8], bytes: &[u8; 64], groups: usize) -> Start {
    let mut w = [0u32; 16];
    for (word, b) in w.iter_mut().zip(bytes.chunks_exact(4)) {
        *word = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    }
    let mut s = mid;
    for (i, w) in w.iter().enumerate().take(4 * groups) {
        round(&mut s, K[i], *w);
    }
    let vector = |g: usize| {
        _mm_set_epi32(
            w[4 * g + 3] as i32,
            w[4 * g + 2] as i32,
            w[4 * g + 1] as i32,
            w[4 * g] as i32,
        )
    };
    Start {
        mid: abef_cdgh(&mid),
        after: abef_cdgh(&s),
        msg: [vector(0), vector(1), vector(2), vector(3)],
    }
}

/// One SHA-256 round on a scalar state (FIPS 180-4 §6.2.2 step 3).
fn round(s: &mut [u32; 8], k: u32, w: u32) {
    let [a, b, c, d, e, f, g, h] = *s;
    let t1 = h
        .wrapping_add(e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25))
        .wrapping_add((e & f) ^ (!e & g))
        .wrapping_add(k)
        .wrapping_add(w);
    let t2 = (a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22))
        .wrapping_add((a & b) ^ (a & c) ^ (b & c));
    *s = [t1.wrapping_add(t2), a, b, c, d.wrapping_add(t1), e, f, g];
}

/// A scalar state as the ABEF and CDGH vectors the round instruction takes.
#[target_feature(enable = "sse2")]
unsafe fn abef_cdgh(s: &[u32; 8]) -> (__m128i, __m128i) {
    let [a, b, c, d, e, f, g, h] = s.map(|x| x as i32);
    (_mm_set_epi32(a, b, e, f), _mm_set_epi32(c, d, g, h))
}

/// Rounds `4N..4N + 4` of every lane (nothing for the salt-only groups,
/// `N < G`), the message schedule's next four words first from `N = 4` on.
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
unsafe fn group<const L: usize, const G: usize, const N: usize>(
    m: &mut [[__m128i; 4]; L],
    abef: &mut [__m128i; L],
    cdgh: &mut [__m128i; L],
) {
    if N < G {
        return;
    }
    // SAFETY: N < 16, so 4 * N + 4 <= 64 words of K.
    let k = _mm_loadu_si128(K.as_ptr().add(4 * N).cast::<__m128i>());
    for l in 0..L {
        if N >= 4 {
            let w = &mut m[l];
            let (w16, w12, w8, w4) = (w[N % 4], w[(N + 1) % 4], w[(N + 2) % 4], w[(N + 3) % 4]);
            let t = _mm_add_epi32(_mm_sha256msg1_epu32(w16, w12), _mm_alignr_epi8(w4, w8, 4));
            w[N % 4] = _mm_sha256msg2_epu32(t, w4);
        }
        let wk = _mm_add_epi32(m[l][N % 4], k);
        cdgh[l] = _mm_sha256rnds2_epu32(cdgh[l], abef[l], wk);
        abef[l] = _mm_sha256rnds2_epu32(abef[l], cdgh[l], _mm_shuffle_epi32(wk, 0x0e));
    }
}

/// Compresses `L` last blocks that differ only past the first `G` message
/// groups; returns each digest's first two words as `A << 32 | B`.
#[inline]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
unsafe fn compress<const L: usize, const G: usize>(
    start: &Start,
    blocks: &[[u8; 64]; L],
) -> [u64; L] {
    // Big-endian words: reverse the bytes of each 32-bit lane.
    let swap = _mm_set_epi64x(0x0c0d_0e0f_0809_0a0b, 0x0405_0607_0001_0203);
    let mut m = [start.msg; L];
    for (lane, block) in m.iter_mut().zip(blocks) {
        for (g, word) in lane.iter_mut().enumerate().skip(G) {
            // SAFETY: g < 4, so 16 * g + 16 <= 64 bytes of the block.
            let p = block.as_ptr().add(16 * g).cast::<__m128i>();
            *word = _mm_shuffle_epi8(_mm_loadu_si128(p), swap);
        }
    }
    let mut abef = [start.after.0; L];
    let mut cdgh = [start.after.1; L];
    // Written out so every index is a constant and the vectors stay in
    // registers.
    group::<L, G, 0>(&mut m, &mut abef, &mut cdgh);
    group::<L, G, 1>(&mut m, &mut abef, &mut cdgh);
    group::<L, G, 2>(&mut m, &mut abef, &mut cdgh);
    group::<L, G, 3>(&mut m, &mut abef, &mut cdgh);
    group::<L, G, 4>(&mut m, &mut abef, &mut cdgh);
    group::<L, G, 5>(&mut m, &mut abef, &mut cdgh);
    group::<L, G, 6>(&mut m, &mut abef, &mut cdgh);
    group::<L, G, 7>(&mut m, &mut abef, &mut cdgh);
    group::<L, G, 8>(&mut m, &mut abef, &mut cdgh);
    group::<L, G, 9>(&mut m, &mut abef, &mut cdgh);
    group::<L, G, 10>(&mut m, &mut abef, &mut cdgh);
    group::<L, G, 11>(&mut m, &mut abef, &mut cdgh);
    group::<L, G, 12>(&mut m, &mut abef, &mut cdgh);
    group::<L, G, 13>(&mut m, &mut abef, &mut cdgh);
    group::<L, G, 14>(&mut m, &mut abef, &mut cdgh);
    group::<L, G, 15>(&mut m, &mut abef, &mut cdgh);
    let mut out = [0u64; L];
    for l in 0..L {
        let s = _mm_add_epi32(abef[l], start.mid.0);
        let a = _mm_extract_epi32(s, 3) as u32;
        let b = _mm_extract_epi32(s, 2) as u32;
        out[l] = (u64::from(a) << 32) | u64::from(b);
    }
    out
}

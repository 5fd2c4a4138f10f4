//! Four SHA-256 compressions side by side, one per 32-bit lane of a
//! `v128` (WebAssembly SIMD). The rounds before `START` are the same for
//! every nonce of a group (their words hold only salt and fixed digits):
//! the caller computes them once, and only rounds `START..64` run here.

use core::arch::wasm32::*;

use crate::sha256::K;

/// Lanes of 32-bit words: one `v128` (four nonces) or two side by side
/// (eight), whose independent rounds fill each other's latency.
pub trait Lanes: Copy {
    fn splat(x: u32) -> Self;
    fn add(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn shr(self, n: u32) -> Self;
    fn shl(self, n: u32) -> Self;
    /// Bits of `a` where `mask` is set, of `b` elsewhere.
    fn select(a: Self, b: Self, mask: Self) -> Self;
}

impl Lanes for v128 {
    #[inline(always)]
    fn splat(x: u32) -> Self {
        u32x4_splat(x)
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        i32x4_add(self, o)
    }
    #[inline(always)]
    fn xor(self, o: Self) -> Self {
        v128_xor(self, o)
    }
    #[inline(always)]
    fn or(self, o: Self) -> Self {
        v128_or(self, o)
    }
    #[inline(always)]
    fn shr(self, n: u32) -> Self {
        u32x4_shr(self, n)
    }
    #[inline(always)]
    fn shl(self, n: u32) -> Self {
        i32x4_shl(self, n)
    }
    #[inline(always)]
    fn select(a: Self, b: Self, mask: Self) -> Self {
        v128_bitselect(a, b, mask)
    }
}

impl Lanes for [v128; 2] {
    #[inline(always)]
    fn splat(x: u32) -> Self {
        [u32x4_splat(x); 2]
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        [i32x4_add(self[0], o[0]), i32x4_add(self[1], o[1])]
    }
    #[inline(always)]
    fn xor(self, o: Self) -> Self {
        [v128_xor(self[0], o[0]), v128_xor(self[1], o[1])]
    }
    #[inline(always)]
    fn or(self, o: Self) -> Self {
        [v128_or(self[0], o[0]), v128_or(self[1], o[1])]
    }
    #[inline(always)]
    fn shr(self, n: u32) -> Self {
        [u32x4_shr(self[0], n), u32x4_shr(self[1], n)]
    }
    #[inline(always)]
    fn shl(self, n: u32) -> Self {
        [i32x4_shl(self[0], n), i32x4_shl(self[1], n)]
    }
    #[inline(always)]
    fn select(a: Self, b: Self, mask: Self) -> Self {
        [
            v128_bitselect(a[0], b[0], mask[0]),
            v128_bitselect(a[1], b[1], mask[1]),
        ]
    }
}

#[inline(always)]
fn rotr<L: Lanes>(x: L, n: u32) -> L {
    x.shr(n).or(x.shl(32 - n))
}

#[inline(always)]
fn xor3<L: Lanes>(a: L, b: L, c: L) -> L {
    a.xor(b).xor(c)
}

#[inline(always)]
fn big_sigma0<L: Lanes>(a: L) -> L {
    xor3(rotr(a, 2), rotr(a, 13), rotr(a, 22))
}

#[inline(always)]
fn big_sigma1<L: Lanes>(e: L) -> L {
    xor3(rotr(e, 6), rotr(e, 11), rotr(e, 25))
}

#[inline(always)]
fn small_sigma0<L: Lanes>(w: L) -> L {
    xor3(rotr(w, 7), rotr(w, 18), w.shr(3))
}

#[inline(always)]
fn small_sigma1<L: Lanes>(w: L) -> L {
    xor3(rotr(w, 17), rotr(w, 19), w.shr(10))
}

#[inline(always)]
fn add<L: Lanes>(a: L, b: L) -> L {
    a.add(b)
}

/// One round, the working variables renamed instead of moved: the new `a`
/// lands in `h`'s variable and the new `e` in `d`'s.
macro_rules! round {
    ($start:expr, $w:ident, $t:expr, $a:ident, $b:ident, $c:ident, $d:ident, $e:ident, $f:ident, $g:ident, $h:ident) => {
        if $t >= 16 {
            let i = $t & 15;
            $w[i] = add(
                add($w[i], small_sigma0($w[($t + 1) & 15])),
                add($w[($t + 9) & 15], small_sigma1($w[($t + 14) & 15])),
            );
        }
        if $t >= $start {
            // Ch(e, f, g) = e ? f : g; Maj(a, b, c) = a ^ b ? c : b.
            let t1 = add(
                add($h, big_sigma1($e)),
                add(L::select($f, $g, $e), add(L::splat(K[$t]), $w[$t & 15])),
            );
            $d = add($d, t1);
            $h = add(t1, add(big_sigma0($a), L::select($c, $b, $a.xor($b))));
        }
    };
}

macro_rules! eight_rounds {
    ($start:expr, $w:ident, $t:expr, $a:ident, $b:ident, $c:ident, $d:ident, $e:ident, $f:ident, $g:ident, $h:ident) => {
        round!($start, $w, $t, $a, $b, $c, $d, $e, $f, $g, $h);
        round!($start, $w, $t + 1, $h, $a, $b, $c, $d, $e, $f, $g);
        round!($start, $w, $t + 2, $g, $h, $a, $b, $c, $d, $e, $f);
        round!($start, $w, $t + 3, $f, $g, $h, $a, $b, $c, $d, $e);
        round!($start, $w, $t + 4, $e, $f, $g, $h, $a, $b, $c, $d);
        round!($start, $w, $t + 5, $d, $e, $f, $g, $h, $a, $b, $c);
        round!($start, $w, $t + 6, $c, $d, $e, $f, $g, $h, $a, $b);
        round!($start, $w, $t + 7, $b, $c, $d, $e, $f, $g, $h, $a);
    };
}

/// The working variables `a` and `b` after the 64 rounds of the block `w`
/// (four blocks, one per lane), starting from `vars`: the variables after
/// the first `START` rounds, as the caller computed them (`[a, …, h]`).
#[inline(always)]
pub fn rounds_from<L: Lanes, const START: usize>(vars: [u32; 8], mut w: [L; 16]) -> (L, L) {
    // Round t reads the variables rotated by t: the variable that holds the
    // working variable i at round START is (i - START) mod 8.
    let v = |j: usize| L::splat(vars[(j + START) % 8]);
    let (mut a, mut b, mut c, mut d) = (v(0), v(1), v(2), v(3));
    let (mut e, mut f, mut g, mut h) = (v(4), v(5), v(6), v(7));
    eight_rounds!(START, w, 0, a, b, c, d, e, f, g, h);
    eight_rounds!(START, w, 8, a, b, c, d, e, f, g, h);
    eight_rounds!(START, w, 16, a, b, c, d, e, f, g, h);
    eight_rounds!(START, w, 24, a, b, c, d, e, f, g, h);
    eight_rounds!(START, w, 32, a, b, c, d, e, f, g, h);
    eight_rounds!(START, w, 40, a, b, c, d, e, f, g, h);
    eight_rounds!(START, w, 48, a, b, c, d, e, f, g, h);
    eight_rounds!(START, w, 56, a, b, c, d, e, f, g, h);
    let _ = (c, d, e, f, g, h);
    (a, b)
}

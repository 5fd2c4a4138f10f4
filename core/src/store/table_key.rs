//! The lookup key of a table store's entry: up to 32 bytes inline, a longer
//! key as its SHA-256, with a hash that is the same in every process (the
//! zone's rbtree is shared by all workers, so the std hasher's random keys
//! would not do).

use sha2::{Digest, Sha256};

/// Keys longer than this are stored as their SHA-256.
pub const INLINE_KEY: usize = 32;
/// `len` of a key stored as its digest (never a real inline length).
const HASHED: u8 = u8::MAX;
/// Bytes of a limit's numbers before the parts of an `after_limit` key.
const LIMIT_PREFIX: usize = 12;

/// A lookup key: up to 32 bytes inline, else its SHA-256.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableKey {
    hash: u32,
    len: u8,
    bytes: [u8; INLINE_KEY],
}

impl TableKey {
    /// The key made of `parts` concatenated.
    #[inline]
    pub fn new(parts: &[&[u8]]) -> Self {
        // One inline part (a refusal's key, a client's: most of a
        // request's lookups) made where it is asked for, without a call
        // (measured: the call and the frame the hashed path needs were a
        // third of its cost).
        if let [part] = parts {
            let mut bytes = [0u8; INLINE_KEY];
            if let Some(dst) = bytes.get_mut(..part.len()) {
                copy_short(dst, part);
                let len = part.len() as u8;
                return Self {
                    hash: key_hash(len, &bytes),
                    len,
                    bytes,
                };
            }
        }
        Self::of_parts(parts)
    }

    /// [`TableKey::new`] of any parts.
    #[inline(never)]
    fn of_parts(parts: &[&[u8]]) -> Self {
        // One pass: every lookup of every request makes one, and nearly
        // every key fits inline.
        let mut bytes = [0u8; INLINE_KEY];
        let mut at = 0;
        for part in parts.iter().filter(|part| !part.is_empty()) {
            match bytes.get_mut(at..at + part.len()) {
                Some(dst) => copy_short(dst, part),
                None => return Self::hashed(parts),
            }
            at += part.len();
        }
        let len = at as u8;
        Self {
            hash: key_hash(len, &bytes),
            len,
            bytes,
        }
    }

    /// The key of `parts` after a limit's numbers (its requests, then its
    /// window, little-endian): `new(&[&requests, &window_ms, parts...])`,
    /// with the fixed part written without a copy call (every request
    /// makes a bucket's key; inline: its 40 bytes are made where the
    /// lookup reads them).
    #[inline(always)]
    pub fn after_limit(requests: u32, window_ms: u64, parts: &[&[u8]]) -> Self {
        const FIXED: usize = LIMIT_PREFIX;
        let mut bytes = [0u8; INLINE_KEY];
        write_limit_prefix(&mut bytes, requests, window_ms);
        let mut at = FIXED;
        for part in parts.iter().filter(|part| !part.is_empty()) {
            match bytes.get_mut(at..at + part.len()) {
                Some(dst) => copy_short(dst, part),
                None => {
                    let mut h = Sha256::new();
                    h.update(&bytes[..FIXED]);
                    for part in parts {
                        h.update(part);
                    }
                    return Self::digest(h);
                }
            }
            at += part.len();
        }
        // (A struct literal, as in `after_limit_marked`: made by a shared
        // helper, the full path's request ran 11 instructions more.)
        let len = at as u8;
        Self {
            hash: key_hash(len, &bytes),
            len,
            bytes,
        }
    }

    /// [`TableKey::after_limit`] of two parts, the byte `mark` and
    /// `text`: a marked client key (the default key of an IPv4 peer, its
    /// address text read where nginx keeps it) as the straight path counts
    /// it, written without the parts' loop (every request of the straight
    /// path makes one). The same key as `after_limit(requests, window_ms,
    /// &[&[mark], text])` when that is inline; `None` when it is hashed
    /// (a text over 19 bytes: never an IPv4 address's).
    #[inline(always)]
    pub fn after_limit_marked(
        requests: u32,
        window_ms: u64,
        mark: u8,
        text: &[u8],
    ) -> Option<Self> {
        const FIXED: usize = LIMIT_PREFIX;
        let mut bytes = [0u8; INLINE_KEY];
        write_limit_prefix(&mut bytes, requests, window_ms);
        bytes[FIXED] = mark;
        let at = FIXED + 1;
        match bytes.get_mut(at..at + text.len()) {
            Some(dst) => copy_short(dst, text),
            None => return None,
        }
        // (A struct literal: made by a helper shared with `after_limit`,
        // the straight request ran 3-4 instructions more, callgrind's
        // handler on 19d64ff.)
        let len = (at + text.len()) as u8;
        Some(Self {
            hash: key_hash(len, &bytes),
            len,
            bytes,
        })
    }

    /// Of a key [`TableKey::after_limit`] made and kept inline, the key of
    /// its parts alone: `new(parts)`; `None` for a hashed one (its parts
    /// are gone). (The straight path's client key, its breaker's, from
    /// its bucket's key: not made again from the parts.)
    pub fn after_limit_parts(&self) -> Option<Self> {
        let len = usize::from(self.len);
        let parts = self.bytes.get(LIMIT_PREFIX..len)?;
        Some(Self::new(&[parts]))
    }

    /// Whether the key is stored as its SHA-256.
    #[inline(always)]
    pub fn is_hashed(&self) -> bool {
        self.len == HASHED
    }

    /// A key longer than [`INLINE_KEY`]: its SHA-256.
    fn hashed(parts: &[&[u8]]) -> Self {
        let mut h = Sha256::new();
        for part in parts {
            h.update(part);
        }
        Self::digest(h)
    }

    /// The key of what `h` has hashed.
    fn digest(h: Sha256) -> Self {
        let bytes: [u8; INLINE_KEY] = h.finalize().into();
        Self {
            hash: key_hash(HASHED, &bytes),
            len: HASHED,
            bytes,
        }
    }

    /// The stable hash (the rbtree's key).
    pub fn hash(&self) -> u32 {
        self.hash
    }

    /// The inline length, or `u8::MAX` for a hashed key.
    pub fn len_tag(&self) -> u8 {
        self.len
    }

    /// All 32 bytes as stored in an entry.
    pub fn bytes(&self) -> &[u8; INLINE_KEY] {
        &self.bytes
    }

    /// The bytes that identify the key (its text, or its digest).
    pub fn stored(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len.min(INLINE_KEY as u8))]
    }
}

/// Writes a limit's numbers first in a key's `bytes` (its requests, then
/// its window, little-endian; [`LIMIT_PREFIX`] bytes).
#[inline(always)]
fn write_limit_prefix(bytes: &mut [u8; INLINE_KEY], requests: u32, window_ms: u64) {
    bytes[..4].copy_from_slice(&requests.to_le_bytes());
    bytes[4..LIMIT_PREFIX].copy_from_slice(&window_ms.to_le_bytes());
}

/// `dst.copy_from_slice(src)` for the short parts keys are made of (at
/// most [`INLINE_KEY`] bytes, lengths known only at run time), inline: two
/// overlapping loads and stores of the widest word that fits, where
/// `copy_from_slice` calls `memcpy` per part (a client key is two parts,
/// on every request).
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n != dst.len() {
        return dst.copy_from_slice(src);
    }
    macro_rules! two {
        ($w:literal) => {{
            let (head, tail) = (n - $w, &src[n - $w..]);
            let first: [u8; $w] = src[..$w].try_into().unwrap_or([0; $w]);
            let last: [u8; $w] = tail.try_into().unwrap_or([0; $w]);
            dst[..$w].copy_from_slice(&first);
            dst[head..].copy_from_slice(&last);
        }};
    }
    match n {
        0 => {}
        1..=3 => {
            dst[0] = src[0];
            dst[n / 2] = src[n / 2];
            dst[n - 1] = src[n - 1];
        }
        4..=7 => two!(4),
        8..=15 => two!(8),
        16..=32 => two!(16),
        _ => dst.copy_from_slice(src),
    }
}

/// A multiply-xorshift hash over the key's four 8-byte words and its
/// length: stable in every process (unlike the std hasher's random keys),
/// and a few multiplications where a byte-wise hash takes 33 dependent
/// ones (it runs for every lookup of every request, under the zone's lock
/// or just before it). Changing it changes the zone's layout
/// (`src/shm`'s `MAGIC`).
#[inline(always)]
fn key_hash(len: u8, bytes: &[u8; INLINE_KEY]) -> u32 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = u64::from(len).wrapping_mul(K);
    for word in bytes.chunks_exact(8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K);
        h ^= h >> 29;
    }
    h = h.wrapping_mul(K);
    (h >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_of_every_short_length_are_concatenated_byte_for_byte() {
        // Every length a part can have inline (0 to 32), after every
        // offset: the short copy's overlapping words put each byte once.
        let text: Vec<u8> = (1..=64u8).collect();
        for first in 0..=INLINE_KEY {
            for second in 0..=INLINE_KEY - first {
                let (a, b) = (&text[..first], &text[32..32 + second]);
                let joined = [a, b].concat();
                let k = TableKey::new(&[a, b]);
                assert_eq!(k.stored(), joined.as_slice(), "{first} + {second}");
                assert_eq!(k.bytes()[first + second..], [0; 32][first + second..]);
                let l = TableKey::after_limit(7, 9, &[b, a]);
                let fixed = [&7u32.to_le_bytes()[..], &9u64.to_le_bytes()[..]].concat();
                let after = TableKey::new(&[&fixed, b, a]);
                assert_eq!(l, after, "{second} + {first} after a limit");
            }
        }
    }

    #[test]
    fn one_part_is_the_key_of_the_same_bytes_in_parts() {
        // Inline (0 to 32 bytes) and hashed: the one part's own path makes
        // the key the parts' path makes, hash included.
        let text: Vec<u8> = (1..=48u8).collect();
        for len in 0..=text.len() {
            let part = &text[..len];
            let (head, tail) = part.split_at(len / 2);
            assert_eq!(
                TableKey::new(&[part]),
                TableKey::of_parts(&[head, tail]),
                "{len}"
            );
            assert_eq!(TableKey::new(&[part]), TableKey::of_parts(&[part]), "{len}");
        }
    }

    #[test]
    fn a_marked_key_after_a_limit_is_the_key_of_its_mark_and_text() {
        // Every text length inline and past it (hashed: none), two marks;
        // the keys' equality includes their hash.
        let text: Vec<u8> = (b'0'..=b'z').collect();
        for mark in [0u8, 1] {
            for len in 0..=INLINE_KEY + 8 {
                let t = &text[..len];
                let (requests, window_ms) = (1_000_000u32, 1_000u64);
                let marked = TableKey::after_limit_marked(requests, window_ms, mark, t);
                let key = TableKey::after_limit(requests, window_ms, &[&[mark], t]);
                let want = (!key.is_hashed()).then_some(key);
                assert_eq!(marked, want, "mark {mark}, {len} bytes");
            }
        }
    }

    #[test]
    fn the_parts_of_an_inline_key_after_a_limit_are_their_own_key() {
        // Every length of one part and of a mark and a text: inline after
        // the limit (up to 20 bytes), its parts' own key; hashed, none.
        let text: Vec<u8> = (1..=40u8).collect();
        for n in 0..=40 {
            let part = &text[..n];
            let key = TableKey::after_limit(100, 60_000, &[part]);
            let parts = key.after_limit_parts();
            assert_eq!(key.is_hashed(), n > INLINE_KEY - LIMIT_PREFIX, "length {n}");
            if key.is_hashed() {
                assert_eq!(parts, None, "length {n}");
            } else {
                assert_eq!(parts, Some(TableKey::new(&[part])), "length {n}");
            }
            if n < 40 {
                let marked = TableKey::after_limit_marked(100, 60_000, 0, part);
                let want = (n < 20).then(|| TableKey::new(&[&[0], part]));
                assert_eq!(
                    marked.and_then(|key| key.after_limit_parts()),
                    want,
                    "marked, length {n}"
                );
            }
        }
    }

    #[test]
    fn a_short_key_is_stored_inline_and_parts_are_concatenated() {
        let k = TableKey::new(&[b"ab", b"cd"]);
        assert_eq!(k.stored(), b"abcd");
        assert_eq!(k.len_tag(), 4);
        assert_eq!(k, TableKey::new(&[b"abcd"]));
    }

    #[test]
    fn a_key_over_32_bytes_is_its_sha256() {
        let long = [b'x'; 33];
        let k = TableKey::new(&[&long]);
        assert_eq!(k.len_tag(), u8::MAX);
        assert_eq!(k.stored(), Sha256::digest(long).as_slice());
        assert_eq!(TableKey::new(&[&[b'x'; 32]]).len_tag(), 32);
    }

    #[test]
    fn a_key_after_a_limit_is_the_key_of_all_its_parts() {
        for parts in [
            &[&b""[..], b"\x00127.0.0.1"][..],
            &[b"\x01key=", b"site"],
            &[b"\x01key=", &[b'n'; 20]],
            &[b"\x01spends=", &[b'x'; 40]],
        ] {
            let (requests, window_ms) = (1_000_000u32, 60_000u64);
            let (r, w) = (requests.to_le_bytes(), window_ms.to_le_bytes());
            let mut all: Vec<&[u8]> = vec![&r, &w];
            all.extend_from_slice(parts);
            assert_eq!(
                TableKey::after_limit(requests, window_ms, parts),
                TableKey::new(&all)
            );
        }
    }

    #[test]
    fn the_hash_is_stable_and_tells_a_key_from_its_digest() {
        // Pinned: every worker and every reload must agree on it.
        assert_eq!(TableKey::new(&[b""]).hash(), TableKey::new(&[]).hash());
        assert_eq!(TableKey::new(&[b"a"]).hash(), 0xcfdd_691b);
        let long = [b'x'; 40];
        let digest = Sha256::digest(long);
        assert_ne!(TableKey::new(&[&long]), TableKey::new(&[digest.as_slice()]));
    }

    #[test]
    fn keys_that_differ_in_one_byte_spread_over_the_hash() {
        let mut hashes: Vec<u32> = (0..10_000u32)
            .map(|i| TableKey::new(&[b"client-", &i.to_le_bytes()]).hash())
            .collect();
        hashes.sort_unstable();
        hashes.dedup();
        assert!(hashes.len() >= 9_990, "{} distinct", hashes.len());
    }
}

//! A client's hash tag held inline ([`Tag`]): what [`super::client_tag`]
//! spells, without a `String` (measured: a request of a Redis Cluster made
//! two or three, an allocation and a free each).

use core::ops::Deref;

use super::{hashed_tag, MAX_READABLE_TAG, READABLE};

/// A hash tag: [`super::client_tag`]'s (or [`super::tag_of`]'s) bytes,
/// inline. Every tag fits in [`MAX_READABLE_TAG`] bytes (a longer readable
/// one is hashed: 44 bytes); one handed in as bytes ([`Tag::from`]) of
/// more is kept as it is, on the heap. Compares as its bytes.
#[derive(Clone)]
pub struct Tag(Repr);

#[derive(Clone)]
enum Repr {
    Inline(u8, [u8; MAX_READABLE_TAG]),
    Heap(Box<[u8]>),
}

impl Tag {
    /// `client_tag(key)`.
    pub fn of(key: &[u8]) -> Tag {
        Tag::of_parts(&[key])
    }

    /// `tag_of(parts)`: the tag of the key made of `parts` one after the
    /// other (a `key=` value's: `OWN_KEY` and the value).
    pub fn of_parts(parts: &[&[u8]]) -> Tag {
        let mut bytes = [0; MAX_READABLE_TAG];
        let mut len = 0;
        for part in parts {
            let mut rest = *part;
            // As `push_readable` spells it: a run of bytes spelled in one
            // byte each (most of a key, often all of it) in a tight loop,
            // then the byte that ends it; a tag that would pass
            // `MAX_READABLE_TAG` is hashed.
            loop {
                let room = bytes.get_mut(len..).unwrap_or_default();
                let run = one_byte_run(room, rest);
                len += run;
                let Some((&b, after)) = rest.get(run..).and_then(<[u8]>::split_first) else {
                    break;
                };
                let (spelled, n) = spelling(b);
                let Some(end) = put(&mut bytes, len, spelled.get(..n).unwrap_or(&[])) else {
                    return Tag::from(hashed_tag(parts).as_bytes());
                };
                len = end;
                rest = after;
            }
        }
        Tag(Repr::Inline(len as u8, bytes))
    }

    /// Its bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self
    }

    /// `slot`, `}{`, then `own`: the tag of a client whose keys take the
    /// slot of another's (`<prefix>{<slot>}{<own>}:...`; Redis hashes
    /// `slot` alone).
    pub fn in_slot_of(slot: &Tag, own: &Tag) -> Tag {
        Tag::of_bytes(&[slot, b"}{", own])
    }

    /// `parts` one after the other, as they are (already spelled), inline
    /// when they fit.
    pub fn of_bytes(parts: &[&[u8]]) -> Tag {
        let mut bytes = [0; MAX_READABLE_TAG];
        let mut len = 0;
        for part in parts {
            let Some(room) = bytes.get_mut(len..len + part.len()) else {
                return Tag(Repr::Heap(parts.concat().into()));
            };
            room.copy_from_slice(part);
            len += part.len();
        }
        Tag(Repr::Inline(len as u8, bytes))
    }

    /// The first `len` bytes of `bytes` (`None`: more than it holds).
    pub fn of_inline(bytes: [u8; MAX_READABLE_TAG], len: usize) -> Option<Tag> {
        (len <= MAX_READABLE_TAG).then_some(Tag(Repr::Inline(len as u8, bytes)))
    }

    /// Its bytes in the whole of its inline room, and how many are its
    /// own (`None`: one held on the heap): what a key's writer copies
    /// whole, a fixed-size copy (`script_call::Wide`).
    pub fn inline(&self) -> Option<(&[u8; MAX_READABLE_TAG], usize)> {
        match &self.0 {
            Repr::Inline(len, bytes) => Some((bytes, usize::from(*len))),
            Repr::Heap(_) => None,
        }
    }

    /// Its bytes as text (a tag `of` some key is ASCII).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(self).into_owned()
    }
}

/// Writes the bytes of `from` that a tag spells in one byte, up to the
/// first that it does not (or the end of `room`): how many.
#[inline(always)]
fn one_byte_run(room: &mut [u8], from: &[u8]) -> usize {
    let mut n = 0;
    for (to, &b) in room.iter_mut().zip(from) {
        match ONE_BYTE[usize::from(b)] {
            0 => break,
            spelled => *to = spelled,
        }
        n += 1;
    }
    n
}

/// How a tag spells each byte where that is one byte (`@` for NUL, a
/// readable byte itself: [`spelling`]); 0: it is not.
const ONE_BYTE: [u8; 256] = {
    let mut t = [0; 256];
    let mut b = 1;
    while b < 256 {
        if READABLE[b] {
            t[b] = b as u8;
        }
        b += 1;
    }
    t[0] = b'@';
    t
};

/// Writes `part` into `bytes` at `at`: where it ends, if it fits.
#[inline(always)]
fn put(bytes: &mut [u8; MAX_READABLE_TAG], at: usize, part: &[u8]) -> Option<usize> {
    let end = at + part.len();
    bytes.get_mut(at..end)?.copy_from_slice(part);
    Some(end)
}

/// How a tag spells byte `b` (`client_tag`): `@` for NUL, the byte itself
/// if readable, else `%` and two lower-case hex digits; and how many bytes
/// that is.
#[inline(always)]
fn spelling(b: u8) -> ([u8; 3], usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    if b == 0 {
        ([b'@', 0, 0], 1)
    } else if READABLE[usize::from(b)] {
        ([b, 0, 0], 1)
    } else {
        let hex = |nibble: u8| HEX[usize::from(nibble & 0xf)];
        ([b'%', hex(b >> 4), hex(b)], 3)
    }
}

impl From<&[u8]> for Tag {
    /// A tag's bytes as they are (inline up to [`MAX_READABLE_TAG`]).
    fn from(bytes: &[u8]) -> Tag {
        let mut inline = [0; MAX_READABLE_TAG];
        match inline.get_mut(..bytes.len()) {
            Some(room) => {
                room.copy_from_slice(bytes);
                Tag(Repr::Inline(bytes.len() as u8, inline))
            }
            None => Tag(Repr::Heap(bytes.into())),
        }
    }
}

impl Deref for Tag {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline(len, bytes) => bytes.get(..usize::from(*len)).unwrap_or(&[]),
            Repr::Heap(bytes) => bytes,
        }
    }
}

impl PartialEq for Tag {
    fn eq(&self, other: &Tag) -> bool {
        **self == **other
    }
}

impl Eq for Tag {}

impl PartialEq<&[u8]> for Tag {
    fn eq(&self, other: &&[u8]) -> bool {
        **self == **other
    }
}

impl core::fmt::Debug for Tag {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        String::from_utf8_lossy(self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{client_tag, tag_of};
    use super::*;

    #[test]
    fn a_tag_is_client_tags_spelling_inline() {
        // Every byte alone, and in a key of each length around the
        // readable limit (plain, escaped, NUL), then hashed.
        for b in 0..=255u8 {
            assert_eq!(Tag::of(&[b]).as_bytes(), client_tag(&[b]).as_bytes(), "{b}");
        }
        for len in 0..=70 {
            for fill in [b'a', b'{', 0, 0xff] {
                let key = vec![fill; len];
                assert_eq!(Tag::of(&key).as_bytes(), client_tag(&key).as_bytes());
                let (head, tail) = key.split_at(len / 3);
                let parts = [&b"\0key="[..], head, tail];
                assert_eq!(Tag::of_parts(&parts).as_bytes(), tag_of(&parts).as_bytes());
            }
        }
        let long = [b'x'; 300];
        assert!(Tag::of(&long).starts_with(b"#"));
        assert_eq!(Tag::of(&long).as_bytes(), client_tag(&long).as_bytes());
    }

    #[test]
    fn a_tag_from_bytes_is_those_bytes_inline_or_not() {
        let long = [b'y'; 100];
        for len in [0, 1, MAX_READABLE_TAG, MAX_READABLE_TAG + 1, 100] {
            let tag = Tag::from(&long[..len]);
            assert_eq!(tag, &long[..len]);
            assert_eq!(matches!(tag.0, Repr::Inline(..)), len <= MAX_READABLE_TAG);
            assert_eq!(tag, Tag::from(&long[..len]));
        }
        assert_ne!(Tag::from(&b"ab"[..]), Tag::from(&b"abc"[..]));
    }
}

#[cfg(test)]
mod mixed_tests {
    use super::super::{client_tag, tag_of};
    use super::*;

    #[test]
    fn mixed_keys_of_every_length_are_spelled_as_client_tag_and_tag_of_spell_them() {
        let mut x: u64 = 0x9e3779b97f4a7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let alphabet = [
            b'a', b'{', b'}', 0, 0xff, b'%', b'#', b'@', b' ', b'~', b'!',
        ];
        for _ in 0..50_000 {
            let len = (next() % 75) as usize;
            let key: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            assert_eq!(
                Tag::of(&key).as_bytes(),
                client_tag(&key).as_bytes(),
                "{key:?}"
            );
            let cut = (next() as usize) % (len + 1);
            let parts = [&b"\0key="[..], &key[..cut], &key[cut..]];
            assert_eq!(Tag::of_parts(&parts).as_bytes(), tag_of(&parts).as_bytes());
        }
    }
}

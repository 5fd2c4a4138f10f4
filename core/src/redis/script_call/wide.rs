//! Keys written whole with fixed-size copies ([`WideKeys`]): each piece
//! of a key (`<prefix>{`, its tag, `}<tail>\r\n`) held in [`WIDE`] bytes
//! and copied as [`WIDE`] bytes whatever its length, the next piece
//! written over what passed its end. Measured: a stacked call's seven
//! keys written a piece at a time into the call (a length check and a
//! `memcpy` call each) cost some 190 instructions a request more.

use crate::redis::command::MAX_READABLE_TAG;

/// How many bytes a piece is copied as: a tag's inline room.
pub const WIDE: usize = MAX_READABLE_TAG;

/// A piece of a key: its bytes, then anything, in [`WIDE`] bytes.
#[derive(Clone, Copy)]
pub struct Wide<'a> {
    bytes: &'a [u8; WIDE],
    len: usize,
}

impl<'a> Wide<'a> {
    /// The first `len` bytes of `bytes` (`None`: more than it holds).
    pub fn of(bytes: &'a [u8; WIDE], len: usize) -> Option<Wide<'a>> {
        (len <= WIDE).then_some(Wide { bytes, len })
    }

    fn len(&self) -> usize {
        self.len.min(WIDE)
    }
}

/// `text` in [`WIDE`] bytes (`None`: longer), kept for [`Wide`] pieces.
pub fn widened(text: &[u8]) -> Option<([u8; WIDE], usize)> {
    let mut bytes = [0; WIDE];
    bytes.get_mut(..text.len())?.copy_from_slice(text);
    Some((bytes, text.len()))
}

/// The most keys of 10 to 99 bytes one [`WideKeys`] holds.
const MAX_KEYS: usize = 24;

/// A room of its own in which keys are written whole, to be copied into
/// a call at once (`ScriptCall::encoded`): its bytes past its keys are
/// what the last copies wrote there.
#[derive(Clone, Debug, Default)]
pub struct WideKeys {
    room: Vec<u8>,
    len: usize,
    keys: usize,
}

impl WideKeys {
    /// No key yet (its room made the first time).
    pub fn clear(&mut self) {
        const ROOM: usize = MAX_KEYS * (5 + 99 + 2) + 5 + 3 * WIDE;
        if self.room.len() < ROOM {
            self.room = vec![0; ROOM];
        }
        (self.len, self.keys) = (0, 0);
    }

    /// Adds the key `<head><tag><close>` (`head`: `<prefix>{`, `close`:
    /// `}<tail>\r\n`), unless it is not of 10 to 99 bytes or there is no
    /// room (`false`: the keys are to be written another way).
    #[inline]
    pub fn key(&mut self, head: Wide, tag: Wide, close: Wide) -> bool {
        let (h, t, c) = (head.len(), tag.len(), close.len());
        let len = (h + t + c).wrapping_sub(2);
        if !(10..100).contains(&len) {
            return false;
        }
        let Some(room) = self.room.get_mut(self.len..self.len + 5 + 3 * WIDE) else {
            return false;
        };
        let tens = b'0' + (len / 10) as u8;
        let ones = b'0' + (len % 10) as u8;
        room[..5].copy_from_slice(&[b'$', tens, ones, b'\r', b'\n']);
        room[5..5 + WIDE].copy_from_slice(head.bytes);
        room[5 + h..5 + h + WIDE].copy_from_slice(tag.bytes);
        room[5 + h + t..5 + h + t + WIDE].copy_from_slice(close.bytes);
        self.len += 5 + h + t + c;
        self.keys += 1;
        true
    }

    /// The keys written, encoded, and how many.
    pub fn words(&self) -> (&[u8], usize) {
        (self.room.get(..self.len).unwrap_or_default(), self.keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::command::encode;

    #[test]
    fn wide_keys_are_encoded_as_their_words_or_refused() {
        let mut keys = WideKeys::default();
        for (head, tag, close) in [
            (
                &b"pow:{"[..],
                &b"@key=203.0.113.0/24}{@203.0.113.7"[..],
                &b"}:s\r\n"[..],
            ),
            (b"{", b"", b"}:s\r\n"),
            (b"p:{", b"ttt", b"}:s\r\n"),
            (b"p:{", b"tttt", b"}:s\r\n"),
            (&[b'p'; 63], &[b't'; 35], b"}\r\n"),
            (&[b'p'; 63], &[b't'; 36], b"}\r\n"),
            (&[b'p'; 20], &[b't'; 64], b"}:w:1000000:86400000\r\n"),
        ] {
            keys.clear();
            let (h, t, c) = (widened(head), widened(tag), widened(close));
            let (h, t, c) = (h.unwrap(), t.unwrap(), c.unwrap());
            fn wide((bytes, len): &([u8; WIDE], usize)) -> Wide<'_> {
                Wide::of(bytes, *len).unwrap()
            }
            let word = [head, tag, close].concat();
            let word = &word[..word.len() - 2];
            let fits = (10..100).contains(&word.len());
            for n in 1..=3 {
                assert_eq!(keys.key(wide(&h), wide(&t), wide(&c)), fits);
                let mut expected = Vec::new();
                encode(&mut expected, &vec![word; n]);
                let (bytes, count) = keys.words();
                match fits {
                    // (`encode` starts with the array's `*<n>\r\n`.)
                    true => assert_eq!((bytes, count), (&expected[4..], n)),
                    false => assert_eq!(count, 0),
                }
            }
        }
        assert!(Wide::of(&[0; WIDE], WIDE + 1).is_none());
        assert!(widened(&[0; WIDE + 1]).is_none());
    }

    #[test]
    fn a_full_room_takes_no_more_keys() {
        let mut keys = WideKeys::default();
        keys.clear();
        let (h, t, c) = (
            widened(b"p:{").unwrap(),
            widened(&[b't'; WIDE]).unwrap(),
            widened(b"}:s\r\n"),
        );
        let c = c.unwrap();
        let n = (0..100)
            .take_while(|_| {
                keys.key(
                    Wide::of(&h.0, h.1).unwrap(),
                    Wide::of(&t.0, 64).unwrap(),
                    Wide::of(&c.0, c.1).unwrap(),
                )
            })
            .count();
        assert!(n >= MAX_KEYS, "{n}");
        assert_eq!(keys.words().1, n);
    }
}

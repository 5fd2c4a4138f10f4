//! The pair read (`two_digit_lines`: two one-digit integer lines in one
//! word) against the line-by-line reading it stands for: every byte of the
//! word at every place, every cut of the buffer, and random arrays of
//! integers, damaged and cut, as the array reader and the whole decoder
//! read them.

use super::*;

/// [`integer_array`] a line at a time, no pair read.
fn line_by_line_integer_array(buf: &[u8], rooms: &mut Rooms) -> Option<(Box<Ints>, usize)> {
    let (count, at) = array_head(buf)?;
    let mut ints = rooms.take();
    let mut rest = buf.get(at..).unwrap_or_default();
    for slot in ints.ints.get_mut(..count).unwrap_or_default() {
        let Some((n, after)) = integer_line(rest) else {
            rooms.keep(ints);
            return None;
        };
        *slot = n;
        rest = after;
    }
    ints.len = count as u8;
    Some((ints, buf.len() - rest.len()))
}

#[test]
fn integer_arrays_read_as_the_line_by_line_reading_reads_them() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut seen_pairs = 0u64;
    for _ in 0..300_000u32 {
        let mut buf = Vec::new();
        let count = (rnd() % 18) as usize;
        buf.extend_from_slice(format!("*{count}\r\n").as_bytes());
        let items = count + (rnd() % 3) as usize;
        for _ in 0..items {
            match rnd() % 10 {
                0..=5 => buf.extend_from_slice(format!(":{}\r\n", rnd() % 10).as_bytes()),
                6 => buf.extend_from_slice(format!(":-{}\r\n", rnd() % 10).as_bytes()),
                7 => buf.extend_from_slice(format!(":{}\r\n", rnd() % 100_000).as_bytes()),
                8 => buf.extend_from_slice(b"$1\r\nx\r\n"),
                _ => buf.extend_from_slice(b"*1\r\n:1\r\n"),
            }
        }
        // Random byte damage.
        for _ in 0..(rnd() % 3) {
            if !buf.is_empty() {
                let at = (rnd() as usize) % buf.len();
                buf[at] = (rnd() % 256) as u8;
            }
        }
        let end = match rnd() % 3 {
            0 => (rnd() as usize) % (buf.len() + 1),
            _ => buf.len(),
        };
        let buf = &buf[..end];
        let new = integer_array(buf, &mut Rooms::default()).map(|(i, l)| (i.to_vec(), l));
        let old =
            line_by_line_integer_array(buf, &mut Rooms::default()).map(|(i, l)| (i.to_vec(), l));
        assert_eq!(new, old, "{:?}", String::from_utf8_lossy(buf));
        if new.is_some() {
            seen_pairs += 1;
        }
        match (decode_reply(buf), scan_then_decode(buf)) {
            (Decoded::Corrupt(_), Decoded::Corrupt(_)) => {}
            (ours, theirs) => assert_eq!(ours, theirs, "{:?}", String::from_utf8_lossy(buf)),
        }
    }
    assert!(seen_pairs > 1_000, "{seen_pairs}");
}

#[test]
fn every_byte_of_a_two_line_word_is_checked_as_two_line_reads_check_it() {
    // Every byte at every one of the 8 places (others valid), and every
    // truncation: the pair read, when it reads, reads as two line reads.
    for pos in 0..8usize {
        for v in 0..=255u8 {
            for (a, b) in [(b'0', b'9'), (b'7', b'3')] {
                let mut w = *b":0\r\n:0\r\n";
                w[1] = a;
                w[5] = b;
                w[pos] = v;
                for tail in [&b""[..], b":5\r\n"] {
                    let buf = [&w[..], tail].concat();
                    for end in 0..=buf.len() {
                        let buf = &buf[..end];
                        let seq = integer_line(buf)
                            .and_then(|(x, r)| integer_line(r).map(|(y, r2)| ([x, y], r2)));
                        if let Some(pair) = two_digit_lines(buf) {
                            assert_eq!(Some(pair), seq, "{buf:?}");
                        }
                    }
                }
            }
        }
    }
}

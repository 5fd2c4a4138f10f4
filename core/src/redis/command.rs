//! Commands and replies on the wire (RESP2): commands encoded by
//! `redis-protocol`; replies scanned for their shape and decoded here (a
//! scalar or an array of scalars: every reply of ours), the cluster's
//! topology by `redis-protocol`'s decoder. No nginx types here, so it is
//! unit-tested.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use pow_shield_protocol::wire::push_hex;
use redis_protocol::resp2::decode::decode;
use redis_protocol::resp2::encode::encode_borrowed;
use redis_protocol::resp2::types::{BorrowedFrame, OwnedFrame};
use sha2::{Digest, Sha256};

mod frame;
mod tag;

pub use frame::{Frame, Ints, Rooms};
pub use tag::Tag;

/// Appends `args` as one RESP2 command to `out`.
pub fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    let parts: Vec<BorrowedFrame> = args.iter().map(|a| BorrowedFrame::BulkString(a)).collect();
    let frame = BorrowedFrame::Array(&parts);
    let at = out.len();
    out.resize(at + frame.encode_len(false), 0);
    // The buffer was sized by the encoder itself, so this cannot run short.
    match encode_borrowed(&mut out[at..], &frame, false) {
        Ok(n) => out.truncate(at + n),
        Err(_) => out.truncate(at),
    }
}

/// A reply, or why the connection can't be trusted any more.
#[derive(Debug, PartialEq)]
pub enum Decoded {
    /// A complete reply and how many bytes it took.
    Frame(Frame, usize),
    /// More bytes are needed.
    Partial,
    /// The stream is not RESP2: the connection must be dropped.
    Corrupt(String),
}

/// Longest status, error or integer line we accept (Redis's error texts
/// are a few hundred bytes at most).
pub const MAX_LINE: usize = 4096;
/// Longest bulk string we accept (ours: a 40-byte script SHA).
pub const MAX_BULK: usize = 4096;
/// Most elements of an array reply (a check script answers 10 or 11
/// integers: `replies::STACKED_REPLY_LEN`, `REPLY_LEN`, and a Redis
/// Cluster's generation).
pub const MAX_ELEMENTS: usize = 16;
/// Longest array or bulk string header (`$`, a length, CRLF).
const MAX_HEADER: usize = 24;
/// So no reply we accept is larger than this.
/// (An element is at most a header and a bulk string, or a line.)
pub const MAX_REPLY: usize = MAX_HEADER + MAX_ELEMENTS * (MAX_HEADER + MAX_BULK + MAX_LINE);

/// Decodes the first reply in `buf`.
///
/// The reply's shape is checked first (`scan_reply`): none of our replies
/// nests arrays or is large, so a nested array, a length beyond the limits
/// or a malformed line is a fault of the connection, and no announced
/// length is waited for beyond them. A complete reply is then decoded
/// without a parser (`flat`), as `redis-protocol`'s decoder makes it.
pub fn decode_reply(buf: &[u8]) -> Decoded {
    decode_reply_in(buf, &mut Rooms::default())
}

/// [`decode_reply`], a script's integers read into a box of `rooms`
/// (a connection's: the boxes of the replies it read before).
pub fn decode_reply_in(buf: &[u8], rooms: &mut Rooms) -> Decoded {
    // Nothing (the rest of a read after its last reply): more bytes are
    // needed, as the general path says, without its scan.
    if buf.is_empty() {
        return Decoded::Partial;
    }
    // A script's answer, an array of plain integers: read in one pass.
    match integer_array(buf, rooms) {
        Some((ints, len)) => Decoded::Frame(Frame::Integers(ints), len),
        None => scan_then_decode(buf),
    }
}

/// Any reply of ours: its shape checked (`scan_reply`), then decoded
/// (`flat`): what [`decode_reply`] answers, had it no one-pass path (the
/// fuzz targets compare the two).
pub fn scan_then_decode(buf: &[u8]) -> Decoded {
    let len = match scan_reply(buf) {
        Err(why) => return Decoded::Corrupt(why),
        Ok(None) => return Decoded::Partial,
        Ok(Some(len)) => len,
    };
    match buf.get(..len).map(flat) {
        Some(Ok(frame)) => Decoded::Frame(Frame::from(frame), len),
        Some(Err(why)) => Decoded::Corrupt(why),
        None => Decoded::Corrupt("a reply longer than the input".to_owned()),
    }
}

/// An array's header of one or two digits at the start of `buf`, its
/// count at most [`MAX_ELEMENTS`]: the count, and where its elements
/// start ([`integer_array`]'s).
#[inline(always)]
fn array_head(buf: &[u8]) -> Option<(usize, usize)> {
    let (count, at) = match buf {
        [b'*', d, b'\r', b'\n', ..] if d.is_ascii_digit() => (usize::from(d - b'0'), 4),
        [b'*', d, e, b'\r', b'\n', ..] if d.is_ascii_digit() && e.is_ascii_digit() => {
            (usize::from(d - b'0') * 10 + usize::from(e - b'0'), 5)
        }
        _ => return None,
    };
    (count <= MAX_ELEMENTS).then_some((count, at))
}

/// A complete array of at most [`MAX_ELEMENTS`] integers at the start of
/// `buf`, each `:`, an optional `-`, digits and CRLF (what a script
/// answers), read in one pass into a box of `rooms`, and its length;
/// `None` for anything else, left to the general path, which reads such
/// an array the same (measured: scanning then decoding cost some 170
/// instructions an integer, a third of a Redis Cluster request's reply
/// handling; a frame an integer, in a room kept for the next reply, some
/// 300 a reply more than this).
fn integer_array(buf: &[u8], rooms: &mut Rooms) -> Option<(Box<Ints>, usize)> {
    let (count, at) = array_head(buf)?;
    let mut ints = rooms.take();
    let mut rest = buf.get(at..).unwrap_or_default();
    // (`count` is at most the box's room: checked above.)
    let mut slots = ints.ints.get_mut(..count).unwrap_or_default();
    loop {
        let left = core::mem::take(&mut slots);
        // Two one-digit integers in one word where they follow each other
        // (most of a script's answer: flags and zero counts).
        let pair = match left.len() >= 2 {
            true => two_digit_lines(rest),
            false => None,
        };
        match (left, pair) {
            ([first, second, more @ ..], Some((pair, after))) => {
                [*first, *second] = pair;
                (slots, rest) = (more, after);
            }
            ([slot, more @ ..], _) => {
                let Some((n, after)) = integer_line(rest) else {
                    // (An incomplete or other reply: its box serves the next.)
                    rooms.keep(ints);
                    return None;
                };
                *slot = n;
                (slots, rest) = (more, after);
            }
            ([], _) => break,
        }
    }
    ints.len = count as u8;
    Some((ints, buf.len() - rest.len()))
}

/// Two lines `:<digit>\r\n` at the start of `buf`, read as one word: their
/// integers and the bytes after them; `None` for anything else (read a
/// line at a time, as [`integer_line`] reads each of these two).
/// (Measured: a line at a time cost some 20 instructions a one-digit
/// integer.)
#[inline(always)]
fn two_digit_lines(buf: &[u8]) -> Option<([i64; 2], &[u8])> {
    // Every byte but the digits' low halves.
    const SHAPE: u64 = 0xffff_f0ff_ffff_f0ff;
    const ZEROS: u64 = u64::from_le_bytes(*b":0\r\n:0\r\n");
    // 6 added to a digit's byte: past '9' it leaves the '0'..'?' range (no
    // carry to the next byte: at most b'?' + 6).
    const SIX: u64 = 0x0000_0600_0000_0600;
    let (word, after) = buf.split_first_chunk::<8>()?;
    let word = u64::from_le_bytes(*word);
    if word & SHAPE != ZEROS || word.wrapping_add(SIX) & SHAPE != ZEROS {
        return None;
    }
    let digit = |at: u32| ((word >> at) & 0x0f) as i64;
    Some(([digit(8), digit(40)], after))
}

/// `:`, an optional `-`, one to 19 digits (no overflow) and CRLF at the
/// start of `buf`: the integer and the bytes after its line. A longer
/// line (no `i64` needs one) is left to the general path, which bounds
/// every line by [`MAX_LINE`] whatever the reads' split; so is a `+`.
#[inline(always)]
fn integer_line(buf: &[u8]) -> Option<(i64, &[u8])> {
    const MOST_DIGITS: usize = 19;
    // Most of a script's integers are one digit (flags, zero counts):
    // their line read as one word, `:`, a digit, CR and LF (measured: a
    // byte at a time cost some 5 instructions an integer more).
    if let Some((line, after)) = buf.split_first_chunk::<4>() {
        let word = u32::from_le_bytes(*line);
        let digit = (word >> 8) & 0x0f;
        if word & 0xffff_f0ff == u32::from_le_bytes(*b":0\r\n") && digit <= 9 {
            return Some((i64::from(digit), after));
        }
    }
    let (negative, digits) = match buf {
        [b':', b'-', rest @ ..] => (true, rest),
        [b':', rest @ ..] => (false, rest),
        _ => return None,
    };
    // Read as a magnitude: 19 digits stay below `u64::MAX`, so no digit
    // needs an overflow check (measured: two checked steps a digit were
    // most of a reply's decoding); the sign's range is checked once.
    // A 20th digit is no CR after the 19th: refused there, not counted
    // a digit at a time.
    let mut n: u64 = 0;
    let mut used = 0;
    for &d in digits.iter().take(MOST_DIGITS) {
        let digit = d.wrapping_sub(b'0');
        if digit > 9 {
            break;
        }
        n = n * 10 + u64::from(digit);
        used += 1;
    }
    let after = match digits.get(used..)? {
        [b'\r', b'\n', after @ ..] if used > 0 => after,
        _ => return None,
    };
    let n = match negative {
        true => 0i64.checked_sub_unsigned(n)?,
        false => i64::try_from(n).ok()?,
    };
    Some((n, after))
}

/// The reply `scan_reply` found complete (`reply`, exactly it: a scalar
/// or an array of scalars), as `redis-protocol`'s decoder makes it, one
/// frame an element, without its parser's machinery (measured: a few
/// percent of a worker's CPU in cluster mode, one reply a call).
fn flat(reply: &[u8]) -> Result<OwnedFrame, String> {
    if reply.first() != Some(&b'*') {
        return scalar(reply).map(|(frame, _)| frame);
    }
    let (count, mut at) = header(reply)?.ok_or("an incomplete array")?;
    if count < 0 {
        return Ok(OwnedFrame::Null);
    }
    let mut items = Vec::with_capacity(count.unsigned_abs().min(MAX_ELEMENTS as u64) as usize);
    for _ in 0..count {
        let (item, used) = scalar(reply.get(at..).unwrap_or_default())?;
        items.push(item);
        at += used;
    }
    Ok(OwnedFrame::Array(items))
}

/// One status, error, integer or bulk string at the start of `buf`, and
/// its length.
fn scalar(buf: &[u8]) -> Result<(OwnedFrame, usize), String> {
    let end = line_end(buf, MAX_LINE)?.ok_or("an incomplete line")?;
    let line = buf.get(1..end - 2).unwrap_or_default();
    let number = || decimal_i64(line).ok_or_else(|| "an invalid number".to_owned());
    let frame = match buf.first() {
        Some(b'+') => OwnedFrame::SimpleString(line.to_vec()),
        Some(b'-') => OwnedFrame::Error(
            core::str::from_utf8(line)
                .map_err(|_| "an error reply not in UTF-8")?
                .to_owned(),
        ),
        Some(b':') => OwnedFrame::Integer(number()?),
        Some(b'$') => {
            let len = number()?;
            if len < 0 {
                return Ok((OwnedFrame::Null, end));
            }
            let data_end = usize::try_from(len)
                .ok()
                .and_then(|len| end.checked_add(len))
                // (Its two bytes after taken as its CRLF, as the parser
                // takes them.)
                .filter(|e| e.saturating_add(2) <= buf.len())
                .ok_or("an incomplete bulk string")?;
            let data = buf.get(end..data_end).unwrap_or_default();
            return Ok((OwnedFrame::BulkString(data.to_vec()), data_end + 2));
        }
        _ => return Err("unexpected reply type".into()),
    };
    Ok((frame, end))
}

/// Decodes the reply a scan found complete in `buf`, `len` bytes long.
fn decode_scanned(buf: &[u8], scanned: Result<Option<usize>, String>) -> Decoded {
    let len = match scanned {
        Err(why) => return Decoded::Corrupt(why),
        Ok(None) => return Decoded::Partial,
        Ok(Some(len)) => len,
    };
    match buf.get(..len).map(decode) {
        Some(Ok(Some((frame, used)))) => Decoded::Frame(Frame::from(frame), used),
        Some(Ok(None)) => Decoded::Partial,
        Some(Err(e)) => Decoded::Corrupt(e.to_string()),
        None => Decoded::Corrupt("a reply longer than the input".to_owned()),
    }
}

/// Largest `CLUSTER SLOTS` reply accepted (some 400 slot ranges).
pub const MAX_TOPOLOGY: usize = 128 * 1024;
/// Most elements of one of its arrays, and how deep they nest (ranges,
/// then a range, then a node, then the node's metadata since Redis 7).
const MAX_TOPOLOGY_ELEMENTS: i64 = 4096;
const MAX_TOPOLOGY_DEPTH: usize = 4;

/// Decodes a `CLUSTER SLOTS` reply: nested arrays, but no deeper than the
/// reply's own shape and no larger than [`MAX_TOPOLOGY`].
pub fn decode_topology(buf: &[u8]) -> Decoded {
    decode_scanned(buf, scan_nested(buf, MAX_TOPOLOGY_DEPTH))
}

fn scan_nested(buf: &[u8], depth: usize) -> Result<Option<usize>, String> {
    if buf.first() != Some(&b'*') {
        return scan_scalar(buf);
    }
    if depth == 0 {
        return Err("arrays nested too deep".into());
    }
    let Some((count, mut at)) = header(buf)? else {
        return Ok(None);
    };
    if count > MAX_TOPOLOGY_ELEMENTS {
        return Err(format!("array of {count} elements"));
    }
    for _ in 0..count.max(0) {
        match scan_nested(&buf[at..], depth - 1)? {
            Some(used) => at += used,
            None => return Ok(None),
        }
        if at > MAX_TOPOLOGY {
            return Err(format!("cluster map larger than {MAX_TOPOLOGY} bytes"));
        }
    }
    Ok(Some(at))
}

/// The length of the first reply if it is complete, `None` if more bytes
/// are needed, an error if it is not a reply of ours.
fn scan_reply(buf: &[u8]) -> Result<Option<usize>, String> {
    if buf.first() != Some(&b'*') {
        return scan_scalar(buf);
    }
    let Some((count, mut at)) = header(buf)? else {
        return Ok(None);
    };
    if count < 0 {
        return Ok(Some(at));
    }
    if count > MAX_ELEMENTS as i64 {
        return Err(format!("array of {count} elements exceeds {MAX_ELEMENTS}"));
    }
    for _ in 0..count {
        if buf.get(at) == Some(&b'*') {
            return Err("nested array".into());
        }
        match scan_scalar(&buf[at..])? {
            Some(used) => at += used,
            None => return Ok(None),
        }
    }
    Ok(Some(at))
}

/// A status, error, integer or bulk string reply (as `scan_reply`).
fn scan_scalar(buf: &[u8]) -> Result<Option<usize>, String> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    match kind {
        b'+' | b'-' | b':' => line_end(buf, MAX_LINE),
        b'$' => {
            let Some((len, at)) = header(buf)? else {
                return Ok(None);
            };
            if len < 0 {
                return Ok(Some(at));
            }
            if len > MAX_BULK as i64 {
                return Err(format!("bulk string of {len} bytes exceeds {MAX_BULK}"));
            }
            let end = at + len as usize + 2;
            Ok((buf.len() >= end).then_some(end))
        }
        other => Err(format!("unexpected reply type {other:#04x}")),
    }
}

/// Where the first line ends (after its CRLF), if within `max` bytes.
fn line_end(buf: &[u8], max: usize) -> Result<Option<usize>, String> {
    let window = &buf[..buf.len().min(max + 2)];
    // Each LF after the first byte, until one follows a CR (measured: a
    // byte search costs a reply a third of a pair-by-pair one).
    let mut from = 1;
    while let Some(lf) = window
        .get(from..)
        .and_then(|w| w.iter().position(|b| *b == b'\n'))
    {
        let lf = from + lf;
        if window.get(lf - 1) == Some(&b'\r') {
            return Ok(Some(lf + 1));
        }
        from = lf + 1;
    }
    match buf.len() >= max + 2 {
        true => Err(format!("line longer than {max} bytes")),
        false => Ok(None),
    }
}

/// A RESP integer or length, as `str::parse::<i64>` reads it (a sign,
/// `+` or `-`, then at least one digit; no overflow), without going
/// through `str` (measured: most of a reply's decoding).
fn decimal_i64(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        let digit = i64::from(d.wrapping_sub(b'0'));
        if digit > 9 {
            return None;
        }
        n = n.checked_mul(10)?;
        n = match negative {
            true => n.checked_sub(digit)?,
            false => n.checked_add(digit)?,
        };
    }
    Some(n)
}

/// The length of an array or bulk string header (-1 for null), and where
/// its data starts.
fn header(buf: &[u8]) -> Result<Option<(i64, usize)>, String> {
    let Some(end) = line_end(buf, MAX_HEADER - 2)? else {
        return Ok(None);
    };
    let len = decimal_i64(&buf[1..end - 2])
        .filter(|n| *n >= -1)
        .ok_or("invalid length")?;
    Ok(Some((len, end)))
}

/// Whether an error reply says the script isn't loaded (EVALSHA → EVAL).
pub fn is_noscript(frame: &Frame) -> bool {
    matches!(frame, Frame::Other(OwnedFrame::Error(e)) if e.starts_with("NOSCRIPT"))
}

/// The longest tag written readable: a client key whose readable tag would
/// be longer is hashed instead, so no tag exceeds this (a long
/// `pow_shield_key` value can't make long Redis keys).
pub const MAX_READABLE_TAG: usize = 64;

/// A client key as it appears in Redis key names (inside the hash tag,
/// `<prefix>{<tag>}`), readable where it can be:
///
/// - printable ASCII stays as it is (`203.0.113.7`, `2001:db8::/64`,
///   `api-key-1`), except `{` and `}` (Redis Cluster's hash tag delimiters:
///   a tag without them keeps every key of a client in one slot), `%`,
///   `#` and `@` (this encoding's own marks), the glob characters
///   `*?[]\` (a tag can be pasted into `SCAN MATCH`), the quotes `"'`
///   and `+` (which a URL's query, as the admin view's `?key=`, reads as a
///   space);
///   these, a space and every other byte are written `%xx` (lower-case
///   hex);
/// - a NUL byte, the default key's mark, is written `@`: the default key of
///   `203.0.113.7` is `@203.0.113.7`;
/// - a key whose tag would be longer than [`MAX_READABLE_TAG`] is `#` and
///   the unpadded base64url of its SHA-256 (44 characters).
///
/// Injective: each byte has its own spelling, none a prefix of another
/// (`%`, `@` and `#` never stand for themselves), and only a hashed tag
/// starts with `#`.
pub fn client_tag(key: &[u8]) -> String {
    let mut tag = String::with_capacity(key.len().min(MAX_READABLE_TAG));
    match push_readable(&mut tag, key) {
        true => tag,
        false => hashed_tag(&[key]),
    }
}

/// [`client_tag`] of the key made of `parts` one after the other, without
/// making that key (a `key=` value's tag: `OWN_KEY` and the value).
pub fn tag_of(parts: &[&[u8]]) -> String {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut tag = String::with_capacity(len.min(MAX_READABLE_TAG));
    match parts.iter().all(|part| push_readable(&mut tag, part)) {
        true => tag,
        false => hashed_tag(parts),
    }
}

/// Writes `bytes` readable after `tag`; `false` once the tag is longer
/// than [`MAX_READABLE_TAG`] (it is hashed instead).
#[inline(always)]
fn push_readable(tag: &mut String, bytes: &[u8]) -> bool {
    for &b in bytes {
        if b == 0 {
            tag.push('@');
        } else if READABLE[usize::from(b)] {
            tag.push(char::from(b));
        } else {
            tag.push('%');
            push_hex(tag, &[b]);
        }
        if tag.len() > MAX_READABLE_TAG {
            return false;
        }
    }
    true
}

/// The bytes a tag keeps as they are.
const READABLE: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = b'!';
    while b <= b'~' {
        t[b as usize] = true;
        b += 1;
    }
    let escaped = b"{}%#@*?[]\\\"'+";
    let mut i = 0;
    while i < escaped.len() {
        t[escaped[i] as usize] = false;
        i += 1;
    }
    t
};

/// A long key's tag: `#` and the unpadded base64url of its SHA-256.
fn hashed_tag(parts: &[&[u8]]) -> String {
    let mut tag = String::with_capacity(44);
    tag.push('#');
    let mut digest = Sha256::new();
    for part in parts {
        digest.update(part);
    }
    URL_SAFE_NO_PAD.encode_string(digest.finalize(), &mut tag);
    tag
}

/// The kind of an error reply for the log: its first word (`WRONGTYPE`,
/// `READONLY`), letters, digits and `_` only, at most 32 of them.
pub fn error_kind(text: &str) -> &str {
    let end = text
        .bytes()
        .take(32)
        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
        .count();
    match &text[..end] {
        "" => "ERR",
        kind => kind,
    }
}

#[cfg(test)]
mod tests;

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
    Frame(OwnedFrame, usize),
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
/// Most elements of an array reply (the script answers 4 integers).
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
    let len = match scan_reply(buf) {
        Err(why) => return Decoded::Corrupt(why),
        Ok(None) => return Decoded::Partial,
        Ok(Some(len)) => len,
    };
    match buf.get(..len).map(flat) {
        Some(Ok(frame)) => Decoded::Frame(frame, len),
        Some(Err(why)) => Decoded::Corrupt(why),
        None => Decoded::Corrupt("a reply longer than the input".to_owned()),
    }
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
        Some(Ok(Some((frame, used)))) => Decoded::Frame(frame, used),
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

/// The integers of an array reply (the sliding-window script's answer).
pub fn integers(frame: &OwnedFrame) -> Option<Vec<i64>> {
    let OwnedFrame::Array(items) = frame else {
        return None;
    };
    // Sized once (collecting into an `Option` grows it one step at a time).
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match item {
            OwnedFrame::Integer(i) => out.push(*i),
            _ => return None,
        }
    }
    Some(out)
}

/// Whether an error reply says the script isn't loaded (EVALSHA → EVAL).
pub fn is_noscript(frame: &OwnedFrame) -> bool {
    matches!(frame, OwnedFrame::Error(e) if e.starts_with("NOSCRIPT"))
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
    for &b in key {
        if b == 0 {
            tag.push('@');
        } else if READABLE[usize::from(b)] {
            tag.push(char::from(b));
        } else {
            tag.push('%');
            push_hex(&mut tag, &[b]);
        }
        if tag.len() > MAX_READABLE_TAG {
            return hashed_tag(key);
        }
    }
    tag
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
fn hashed_tag(key: &[u8]) -> String {
    let mut tag = String::with_capacity(44);
    tag.push('#');
    URL_SAFE_NO_PAD.encode_string(Sha256::digest(key), &mut tag);
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
mod tests {
    use super::*;

    /// `redis-protocol`'s decoding of a reply the scan found (the topology's
    /// path), which `decode_reply` must match.
    fn by_parser(buf: &[u8]) -> Decoded {
        decode_scanned(buf, scan_reply(buf))
    }

    #[test]
    fn a_flat_reply_decodes_as_the_parser_decodes_it() {
        let cases: &[&[u8]] = &[
            b"*11\r\n:1\r\n:4\r\n:60000\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n:1765000000123456\r\n",
            b"*3\r\n:-1\r\n$3\r\nabc\r\n+OK\r\n",
            b"*2\r\n$-1\r\n$0\r\n\r\n",
            b"*0\r\n",
            b"*-1\r\n",
            b"$-1\r\n",
            b"$5\r\n1 2 3\r\n",
            b"$5\r\n1 2 3\r\n:7\r\n",
            b"+EXPIRED 1765000000123\r\n",
            b"-NOSCRIPT No matching script\r\n",
            b"-MOVED 3999 127.0.0.1:6381\r\n",
            b":9223372036854775807\r\n",
            b":-9223372036854775808\r\n",
            b"*2\r\n:1\r\n",
            b"*2\r\n:1\r\n:2",
            b"$5\r\n1 2",
            b":12",
            b"",
            b"*1\r\n:x\r\n",
            b":1x\r\n",
            b"$3\r\nabcd\r\n",
            b"*1\r\n$3\r\nab\r\n\r\n",
            b"-\xff\xfe\r\n",
            b"%1\r\n",
            b"-ASK 3999 127.0.0.1:6381\r\n",
            b":+5\r\n",
            b"$+3\r\nabc\r\n",
            b"*1\r\n$-1\r\n",
            b"+\r\n",
            b":\r\n",
            b"+a\nb\r\n",
            b"+a\r\rb\r\n",
            b":1\n2\r\n",
            b"\n\r\n",
            b"*1\r\n:\n\r\n",
            b":-\r\n",
            b":-0\r\n",
            b":9223372036854775808\r\n",
            b":-9223372036854775809\r\n",
            b"$-2\r\n",
            b"*+1\r\n:1\r\n",
        ];
        for case in cases {
            let (ours, theirs) = (decode_reply(case), by_parser(case));
            match (&ours, &theirs) {
                (Decoded::Corrupt(_), Decoded::Corrupt(_)) => {}
                _ => assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(case)),
            }
        }
    }

    #[test]
    fn an_array_of_integers_reads_as_its_integers_and_anything_else_as_none() {
        use OwnedFrame::{Array, BulkString, Integer, Null};
        let cases = [
            (
                Array(vec![Integer(1), Integer(-4), Integer(60_000)]),
                Some(vec![1, -4, 60_000]),
            ),
            (
                Array((0..16).map(Integer).collect()),
                Some((0..16).collect()),
            ),
            (Array(vec![]), Some(vec![])),
            (Array(vec![Integer(1), Null]), None),
            (Array(vec![BulkString(b"1".to_vec())]), None),
            (Integer(1), None),
            (Null, None),
        ];
        for (frame, expected) in cases {
            assert_eq!(integers(&frame), expected, "{frame:?}");
        }
    }

    #[test]
    fn a_resp_number_reads_as_str_parse_reads_it() {
        let cases = [
            "0",
            "7",
            "-1",
            "+5",
            "-0",
            "+0",
            "",
            "+",
            "-",
            "--1",
            "+-1",
            "1-",
            " 1",
            "1 ",
            "1x",
            "x",
            "007",
            "60000",
            "1765000000123456",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "99999999999999999999",
            "\u{663}",
            "1/",
            ":",
        ];
        for case in cases {
            assert_eq!(
                decimal_i64(case.as_bytes()),
                case.parse::<i64>().ok(),
                "{case:?}"
            );
        }
    }

    /// What a reply's decoding and a tag cost, against the parser's and
    /// `hex::encode`: `cargo test --release -p pow-shield-core
    /// cost_of_a_reply_and_a_tag -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn cost_of_a_reply_and_a_tag() {
        let reply =
            b"*11\r\n:1\r\n:4\r\n:60000\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n";
        let key = b"\x00203.0.113.7";
        let n = 2_000_000;
        let time = |what: &str, f: &mut dyn FnMut() -> usize| {
            let start = std::time::Instant::now();
            let mut sum = 0;
            for _ in 0..n {
                sum += f();
            }
            let ns = start.elapsed().as_nanos() as f64 / f64::from(n);
            eprintln!("{what}: {ns:.0} ns ({sum})");
        };
        time(
            "decode_reply",
            &mut || match decode_reply(std::hint::black_box(reply)) {
                Decoded::Frame(_, used) => used,
                _ => 0,
            },
        );
        time(
            "the parser",
            &mut || match by_parser(std::hint::black_box(reply)) {
                Decoded::Frame(_, used) => used,
                _ => 0,
            },
        );
        time("client_tag", &mut || {
            client_tag(std::hint::black_box(key)).len()
        });
        time("hex::encode", &mut || {
            hex::encode(std::hint::black_box(key)).len()
        });
    }

    #[test]
    fn a_client_tag_keeps_printable_ascii_escapes_the_rest_and_hashes_a_long_key() {
        let hashed_65_a = "#Y1NhxIu56rFBmOduqKt_GkFoXWrWKqkUbTAdTxfrCuA";
        let hashed_22_braces = "#MLJWW9rFJu8Gq0bL3z3sKis-eVonqQob1OlwoPhalD8";
        let table: &[(&[u8], &str)] = &[
            (b"", ""),
            (b"\x00203.0.113.7", "@203.0.113.7"),
            (b"\x002001:db8:1:2::/64", "@2001:db8:1:2::/64"),
            (b"\x00unix:", "@unix:"),
            (b"203.0.113.7", "203.0.113.7"),
            (
                b"api-key_1.v2~x/y=z,(1)<2>|$&!^;`",
                "api-key_1.v2~x/y=z,(1)<2>|$&!^;`",
            ),
            (b"{acl}", "%7bacl%7d"),
            (b"50%", "50%25"),
            (b"#1", "%231"),
            (b"@", "%40"),
            (b"a b", "a%20b"),
            (b"a\x00b", "a@b"),
            (b"*?[]\\\"'", "%2a%3f%5b%5d%5c%22%27"),
            ("caf\u{e9}".as_bytes(), "caf%c3%a9"),
            (b"\x01key=v", "%01key=v"),
            (b"\x00key=198.51.100.0/24", "@key=198.51.100.0/24"),
            (b"a+b", "a%2bb"),
            (b"\t\r\n\x7f\xff", "%09%0d%0a%7f%ff"),
            (&[b'a'; MAX_READABLE_TAG], &"a".repeat(MAX_READABLE_TAG)),
            (&[b'a'; MAX_READABLE_TAG + 1], hashed_65_a),
            (&[b'{'; 21], &"%7b".repeat(21)),
            (&[b'{'; 22], hashed_22_braces),
        ];
        for (key, tag) in table {
            assert_eq!(client_tag(key), *tag, "{key:?}");
        }
        let long = client_tag(&[b'a'; 4096]);
        assert_eq!(long.len(), 44);
        assert!(long.starts_with('#'));
        assert_ne!(long, client_tag(&[b'a'; 4097]));
    }

    /// A readable tag's key (the encoding read back); `None` for a hashed
    /// tag or a spelling `client_tag` never writes.
    fn untag(tag: &str) -> Option<Vec<u8>> {
        let mut key = Vec::new();
        let mut bytes = tag.bytes();
        while let Some(b) = bytes.next() {
            key.push(match b {
                b'@' => 0,
                b'%' => {
                    let hex = [bytes.next()?, bytes.next()?];
                    u8::from_str_radix(core::str::from_utf8(&hex).ok()?, 16).ok()?
                }
                b if READABLE[usize::from(b)] => b,
                _ => return None,
            });
        }
        Some(key)
    }

    #[test]
    fn distinct_client_keys_have_distinct_tags_without_braces() {
        // Keys over the bytes the encoding treats apart, at lengths around
        // the bound: each readable tag reads back to its key, and no two
        // keys share a tag.
        let alphabet = b"\x00\x01%@#{}a02 \xff:*";
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        let mut seen = std::collections::HashMap::new();
        for _ in 0..50_000 {
            let len = (next() % 80) as usize;
            let key: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            let tag = client_tag(&key);
            assert!(!tag.contains(['{', '}']), "{tag}");
            assert!(tag.len() <= MAX_READABLE_TAG, "{tag}");
            match tag.starts_with('#') {
                true => assert_eq!(tag.len(), 44),
                false => assert_eq!(untag(&tag).as_deref(), Some(&key[..]), "{tag}"),
            }
            if let Some(other) = seen.insert(tag.clone(), key.clone()) {
                assert_eq!(other, key, "two keys share the tag {tag}");
            }
        }
    }

    #[test]
    fn a_command_is_an_array_of_bulk_strings() {
        let mut out = Vec::new();
        encode(&mut out, &[b"SET", b"k", b"1"]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n1\r\n");
    }

    #[test]
    fn commands_are_appended_for_one_flush() {
        let mut out = Vec::new();
        encode(&mut out, &[b"PING"]);
        encode(&mut out, &[b"PING"]);
        assert_eq!(out, b"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n");
    }

    #[test]
    fn binary_arguments_are_sent_as_is() {
        let mut out = Vec::new();
        encode(&mut out, &[b"\r\n\0"]);
        assert_eq!(out, b"*1\r\n$3\r\n\r\n\0\r\n");
    }

    #[test]
    fn a_partial_reply_waits_for_more_bytes() {
        assert_eq!(decode_reply(b"*4\r\n:1\r\n:2"), Decoded::Partial);
        assert_eq!(decode_reply(b""), Decoded::Partial);
    }

    #[test]
    fn pipelined_replies_decode_one_at_a_time() {
        let buf = b"+OK\r\n$-1\r\n";
        let Decoded::Frame(first, used) = decode_reply(buf) else {
            panic!()
        };
        assert_eq!(first, OwnedFrame::SimpleString(b"OK".to_vec()));
        assert_eq!(used, 5);
        assert_eq!(
            decode_reply(&buf[used..]),
            Decoded::Frame(OwnedFrame::Null, 5)
        );
    }

    #[test]
    fn garbage_is_corrupt() {
        assert!(matches!(decode_reply(b"?what\r\n"), Decoded::Corrupt(_)));
    }

    #[test]
    fn integer_arrays_are_read_and_anything_else_refused() {
        let Decoded::Frame(f, _) = decode_reply(b"*2\r\n:1\r\n:-5\r\n") else {
            panic!()
        };
        assert_eq!(integers(&f), Some(vec![1, -5]));
        let Decoded::Frame(f, _) = decode_reply(b"*2\r\n:1\r\n$1\r\nx\r\n") else {
            panic!()
        };
        assert_eq!(integers(&f), None);
        assert_eq!(integers(&OwnedFrame::Integer(1)), None);
    }

    #[test]
    fn replies_of_ours_decode() {
        for reply in [
            &b"+OK\r\n"[..],
            b"$-1\r\n",
            b"*-1\r\n",
            b":42\r\n",
            b"$40\r\n0123456789012345678901234567890123456789\r\n",
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            b"*4\r\n:1\r\n:9\r\n:60000\r\n:0\r\n",
        ] {
            assert!(
                matches!(decode_reply(reply), Decoded::Frame(_, n) if n == reply.len()),
                "{reply:?}"
            );
        }
    }

    #[test]
    fn a_deeply_nested_reply_is_corrupt_not_a_crash() {
        let reply = b"*1\r\n".repeat(60_000);
        assert!(matches!(decode_reply(&reply), Decoded::Corrupt(_)));
    }

    #[test]
    fn a_nested_array_is_corrupt_even_before_it_is_complete() {
        assert!(matches!(
            decode_reply(b"*2\r\n:1\r\n*1"),
            Decoded::Corrupt(_)
        ));
    }

    #[test]
    fn an_announced_length_beyond_ours_is_corrupt_at_once() {
        assert!(matches!(
            decode_reply(b"$200000000\r\nxx"),
            Decoded::Corrupt(_)
        ));
        assert!(matches!(decode_reply(b"*100000\r\n"), Decoded::Corrupt(_)));
    }

    #[test]
    fn a_line_without_end_is_corrupt_once_longer_than_ours() {
        let mut reply = b"-ERR ".to_vec();
        reply.resize(MAX_LINE, b'x');
        assert_eq!(decode_reply(&reply), Decoded::Partial);
        reply.resize(MAX_LINE + 2, b'x');
        assert!(matches!(decode_reply(&reply), Decoded::Corrupt(_)));
    }

    #[test]
    fn a_bad_length_is_corrupt() {
        assert!(matches!(decode_reply(b"$-2\r\n"), Decoded::Corrupt(_)));
        assert!(matches!(decode_reply(b"*x\r\n"), Decoded::Corrupt(_)));
        let padded = [&b"$"[..], &[b'0'; 100], b"1\r\n"].concat();
        assert!(matches!(decode_reply(&padded), Decoded::Corrupt(_)));
    }

    #[test]
    fn the_largest_reply_accepted_is_bounded() {
        let element = [&b"$4096\r\n"[..], &[b'x'; MAX_BULK], b"\r\n"].concat();
        let reply = [&b"*16\r\n"[..], &element.repeat(MAX_ELEMENTS)].concat();
        assert!(reply.len() <= MAX_REPLY);
        assert!(matches!(decode_reply(&reply), Decoded::Frame(_, n) if n == reply.len()));
    }

    #[test]
    fn a_partial_bulk_string_waits() {
        assert_eq!(decode_reply(b"$5\r\nab"), Decoded::Partial);
        assert_eq!(decode_reply(b"*2\r\n$5\r\nab"), Decoded::Partial);
    }

    #[test]
    fn an_error_kind_is_its_first_word() {
        assert_eq!(error_kind("WRONGTYPE Operation against a key"), "WRONGTYPE");
        assert_eq!(error_kind("MOVED 3999 127.0.0.1:6381"), "MOVED");
        assert_eq!(error_kind(""), "ERR");
        assert_eq!(error_kind("\u{1b}[31m"), "ERR");
        assert_eq!(error_kind(&"A".repeat(100)).len(), 32);
    }

    #[test]
    fn a_cluster_map_decodes_nested_once_complete() {
        // Redis 7: a node's fourth element is its metadata (hostname...).
        let reply =
            b"*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n*0\r\n";
        for end in 1..reply.len() {
            assert_eq!(decode_topology(&reply[..end]), Decoded::Partial, "{end}");
        }
        assert!(matches!(decode_topology(reply), Decoded::Frame(_, n) if n == reply.len()));
    }

    #[test]
    fn a_cluster_map_nested_deeper_or_larger_than_ours_is_corrupt() {
        assert!(matches!(
            decode_topology(b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n"),
            Decoded::Corrupt(_)
        ));
        assert!(matches!(decode_topology(b"*5000\r\n"), Decoded::Corrupt(_)));
        let mut big = b"*4096\r\n".to_vec();
        for _ in 0..4096 {
            big.extend_from_slice(b"$40\r\n0123456789012345678901234567890123456789\r\n");
        }
        assert!(matches!(decode_topology(&big), Decoded::Corrupt(_)));
    }

    #[test]
    fn noscript_is_recognised() {
        let f = OwnedFrame::Error("NOSCRIPT No matching script. Please use EVAL.".into());
        assert!(is_noscript(&f));
        assert!(!is_noscript(&OwnedFrame::Error("ERR wrong".into())));
    }
}

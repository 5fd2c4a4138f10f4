//! Commands and replies on the wire (RESP2 via `redis-protocol`): no nginx
//! types here, so it is unit-tested.

use redis_protocol::resp2::decode::decode;
use redis_protocol::resp2::encode::encode_borrowed;
use redis_protocol::resp2::types::{BorrowedFrame, OwnedFrame};

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

/// Decodes the first reply in `buf`.
pub fn decode_reply(buf: &[u8]) -> Decoded {
    match decode(buf) {
        Ok(Some((frame, used))) => Decoded::Frame(frame, used),
        Ok(None) => Decoded::Partial,
        Err(e) => Decoded::Corrupt(e.to_string()),
    }
}

/// The integers of an array reply (the sliding-window script's answer).
pub fn integers(frame: &OwnedFrame) -> Option<Vec<i64>> {
    match frame {
        OwnedFrame::Array(items) => items
            .iter()
            .map(|f| match f {
                OwnedFrame::Integer(i) => Some(*i),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// Whether an error reply says the script isn't loaded (EVALSHA → EVAL).
pub fn is_noscript(frame: &OwnedFrame) -> bool {
    matches!(frame, OwnedFrame::Error(e) if e.starts_with("NOSCRIPT"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn noscript_is_recognised() {
        let f = OwnedFrame::Error("NOSCRIPT No matching script. Please use EVAL.".into());
        assert!(is_noscript(&f));
        assert!(!is_noscript(&OwnedFrame::Error("ERR wrong".into())));
    }
}

//! `redis::script_call`, the in-place EVALSHA encoder every cluster-mode
//! request uses, against the generic encoder (`redis::command::encode`):
//! the same bytes for any SHA, keys and arguments, a RESP array of the same
//! words, and the same EVAL resend.
//!
//! Input: how many of the words are keys (`% (words + 1)`), then the SHA,
//! the script and the words, separated by 0xff bytes. A word of 0xfe and
//! eight more bytes is a number (`ScriptCall::num`, little-endian).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pow_shield_core::redis::command::encode;
use pow_shield_core::redis::script_call::{eval, ScriptCall};
use redis_protocol::resp2::decode::decode;
use redis_protocol::resp2::types::OwnedFrame;

/// More words than any script call of ours has (12).
const MAX_WORDS: usize = 64;

enum Word<'a> {
    Bytes(&'a [u8]),
    Num(u64),
}

fuzz_target!(|data: &[u8]| {
    let [keys, rest @ ..] = data else {
        return;
    };
    let mut parts = rest.split(|b| *b == 0xff);
    let (Some(sha), Some(script)) = (parts.next(), parts.next()) else {
        return;
    };
    let sha = String::from_utf8_lossy(sha);
    let script = String::from_utf8_lossy(script);
    let words: Vec<Word> = parts
        .take(MAX_WORDS)
        .map(|w| match w {
            [0xfe, n @ ..] if n.len() >= 8 => {
                let mut le = [0u8; 8];
                le.copy_from_slice(&n[..8]);
                Word::Num(u64::from_le_bytes(le))
            }
            w => Word::Bytes(w),
        })
        .collect();
    let keys = usize::from(*keys) % (words.len() + 1);

    let mut call = ScriptCall::new(&sha, keys, words.len() - keys);
    for word in &words {
        match word {
            Word::Bytes(b) => call.push(|w| w.extend_from_slice(b)),
            Word::Num(n) => call.num(*n),
        };
    }
    let (evalsha, shared) = call.finish();

    let texts: Vec<Vec<u8>> = words
        .iter()
        .map(|w| match w {
            Word::Bytes(b) => b.to_vec(),
            Word::Num(n) => n.to_string().into_bytes(),
        })
        .collect();
    let numkeys = keys.to_string();
    let generic = |name: &[u8], first: &[u8]| {
        let mut args: Vec<&[u8]> = vec![name, first, numkeys.as_bytes()];
        args.extend(texts.iter().map(Vec::as_slice));
        let mut out = Vec::new();
        encode(&mut out, &args);
        (out, args.iter().map(|a| a.to_vec()).collect::<Vec<_>>())
    };

    let (expected, args) = generic(b"EVALSHA", sha.as_bytes());
    assert_eq!(
        evalsha, expected,
        "EVALSHA differs from the generic encoder"
    );
    // What Redis reads: one array of exactly these words, nothing left over.
    match decode(&evalsha) {
        Ok(Some((OwnedFrame::Array(items), used))) => {
            assert_eq!(used, evalsha.len());
            let read: Vec<Vec<u8>> = items
                .into_iter()
                .map(|item| match item {
                    OwnedFrame::BulkString(b) => b,
                    other => panic!("not a bulk string: {other:?}"),
                })
                .collect();
            assert_eq!(read, args);
        }
        other => panic!("EVALSHA does not decode: {other:?}"),
    }

    let (expected, _) = generic(b"EVAL", script.as_bytes());
    assert_eq!(
        eval(&evalsha, shared, &script),
        expected,
        "EVAL resend differs"
    );
});

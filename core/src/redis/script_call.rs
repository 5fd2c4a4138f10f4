//! `EVALSHA <sha> <numkeys> <keys> <args>` encoded straight into one
//! buffer: every shielded request in cluster mode builds one, so its
//! arguments are formatted in place instead of as a `String` each.

use super::clock;

/// An EVALSHA being written.
#[derive(Clone, Debug)]
pub struct ScriptCall {
    cmd: Vec<u8>,
    /// Where `<numkeys>` starts: what EVAL shares with EVALSHA.
    shared: usize,
    /// Keys and arguments still to write (checked in debug builds and
    /// unit tests only: measured, its count cost some 4 instructions a
    /// word).
    #[cfg(any(debug_assertions, test))]
    left: usize,
}

impl ScriptCall {
    /// `EVALSHA <sha> <keys>`, to be followed by `keys + args` words.
    pub fn new(sha: &str, keys: usize, args: usize) -> Self {
        let mut call = Self {
            cmd: Vec::with_capacity(CALL_CAPACITY),
            shared: 0,
            // (and `<numkeys>`)
            #[cfg(any(debug_assertions, test))]
            left: keys + args + 1,
        };
        let words = 3 + keys + args;
        match <&[u8; 40]>::try_from(sha.as_bytes()) {
            // The usual call (10 to 99 words, a script's 40-byte SHA):
            // its start in fixed writes (measured: a number's digits and a
            // bulk string's header cost some 100 instructions a call).
            Ok(sha) if (10..100).contains(&words) => {
                let [tens, ones] = two_digits(words);
                call.cmd.extend_from_slice(&[b'*', tens, ones]);
                call.cmd.extend_from_slice(b"\r\n$7\r\nEVALSHA\r\n$40\r\n");
                call.cmd.extend_from_slice(sha);
                call.cmd.extend_from_slice(b"\r\n");
            }
            _ => {
                call.cmd.push(b'*');
                decimal(&mut call.cmd, words as u64);
                call.cmd.extend_from_slice(b"\r\n$7\r\nEVALSHA\r\n");
                bulk(&mut call.cmd, sha.as_bytes());
            }
        }
        call.shared = call.cmd.len();
        call.num(keys as u64);
        call
    }

    /// A call of its own with this one's words so far (a start made once
    /// and copied: measured, [`ScriptCall::new`] cost some 60
    /// instructions more a call).
    pub fn again(&self) -> Self {
        let mut cmd = spare::take();
        cmd.reserve(CALL_CAPACITY.max(self.cmd.len()));
        cmd.extend_from_slice(&self.cmd);
        Self { cmd, ..*self }
    }

    /// `words` keys or arguments alone, no command before them: words
    /// made once and copied into calls ([`ScriptCall::encoded`]).
    pub(crate) fn words(words: usize) -> Self {
        #[cfg(not(any(debug_assertions, test)))]
        let _ = words;
        Self {
            cmd: Vec::with_capacity(WORDS_CAPACITY),
            shared: 0,
            #[cfg(any(debug_assertions, test))]
            left: words,
        }
    }

    /// `n` keys or arguments encoded already (the words of a
    /// [`ScriptCall::words`]).
    pub(crate) fn encoded(&mut self, (words, n): (&[u8], usize)) -> &mut Self {
        self.cmd.extend_from_slice(words);
        self.words_written(n);
        self
    }

    /// The next key or argument, as `format` writes it: in place, after
    /// room for a header of a two-digit length, then the header written
    /// there (the word moved by a byte or more when its length has
    /// another number of digits: a short copy, no buffer of its own).
    pub fn push(&mut self, format: impl FnOnce(&mut Vec<u8>)) -> &mut Self {
        const ROOM: usize = b"$00\r\n".len();
        let start = self.cmd.len();
        self.cmd.extend_from_slice(b"$00\r\n");
        let data = start + ROOM;
        format(&mut self.cmd);
        let len = self.cmd.len() - data;
        // The usual word (a key, a member): 10 to 99 bytes, its header
        // fits the room as it is.
        if (10..100).contains(&len) {
            if let Some(room) = self.cmd.get_mut(start + 1..start + 3) {
                room.copy_from_slice(&two_digits(len));
            }
            self.cmd.extend_from_slice(b"\r\n");
            self.word_written();
            return self;
        }
        let mut digits = [0u8; 20];
        let text = digits_of(len as u64, &mut digits);
        let head = 1 + text.len() + 2;
        if head < ROOM {
            self.cmd.copy_within(data.., start + head);
            self.cmd.truncate(start + head + len);
        } else if head > ROOM {
            self.cmd.resize(self.cmd.len() + head - ROOM, 0);
            self.cmd.copy_within(data..data + len, start + head);
        }
        if let Some(room) = self.cmd.get_mut(start..start + head) {
            room[0] = b'$';
            room[1..=text.len()].copy_from_slice(text);
            room[head - 2..].copy_from_slice(b"\r\n");
        }
        self.cmd.extend_from_slice(b"\r\n");
        self.word_written();
        self
    }

    /// The key `<prefix>{<tag>}<tail>`, then the same key once for each
    /// of `letters`, its tail's letter (the byte after its colon) that one
    /// instead: a client's keys of one limit, or of its breaker, differ in
    /// no more (`:w:…`, `:o:…`; `:s`, `:t`, `:u`). The first is written
    /// with its length known first (measured: a key in pieces through
    /// `push` cost some 130 instructions), the others copied whole from it
    /// (a key written anew cost three times as much).
    pub fn keys_differing(
        &mut self,
        prefix: &[u8],
        tag: &[u8],
        tail: &[u8],
        letters: &[u8],
    ) -> &mut Self {
        let key = self.key(prefix, tag, tail);
        for &letter in letters {
            self.key_with(key, letter);
        }
        self
    }

    /// A key `<prefix>{<tag>}<tail>`, its header written as it goes, no
    /// room to fix up; where its word lies, for [`ScriptCall::key_with`].
    fn key(&mut self, prefix: &[u8], tag: &[u8], tail: &[u8]) -> KeyWord {
        let at = self.cmd.len();
        self.header(prefix.len() + 2 + tag.len() + tail.len());
        self.cmd.extend_from_slice(prefix);
        self.cmd.push(b'{');
        self.cmd.extend_from_slice(tag);
        self.cmd.push(b'}');
        // (The letter of `:w:`, `:s`: after the colon.)
        let letter_at = (tail.len() >= 2).then_some(self.cmd.len() + 1);
        self.end_key(tail);
        KeyWord {
            at,
            len: self.cmd.len() - at,
            letter_at,
        }
    }

    /// The key `key` once more (a word this call just wrote: only
    /// [`ScriptCall::keys_differing`] makes one), its tail's letter
    /// `letter` instead.
    fn key_with(&mut self, key: KeyWord, letter: u8) {
        let KeyWord { at, len, letter_at } = key;
        let end = self.cmd.len();
        // (Always within: a call only grows after a key.)
        debug_assert!(at + len <= end && letter_at.is_some());
        if at + len <= end {
            self.cmd.extend_from_within(at..at + len);
            let copied = letter_at.map(|i| end + (i - at));
            if let Some(byte) = copied.and_then(|i| self.cmd.get_mut(i)) {
                *byte = letter;
            }
        }
        self.word_written();
    }

    /// A key's `<tail>\r\n`, and one word fewer to write.
    fn end_key(&mut self, tail: &[u8]) {
        self.cmd.extend_from_slice(tail);
        self.cmd.extend_from_slice(b"\r\n");
        self.word_written();
    }

    /// `$<len>\r\n`: a key's usual length (10 to 99) as one fixed write.
    #[inline]
    fn header(&mut self, len: usize) {
        if (10..100).contains(&len) {
            let [tens, ones] = two_digits(len);
            self.cmd
                .extend_from_slice(&[b'$', tens, ones, b'\r', b'\n']);
            return;
        }
        let mut digits = [0u8; 20];
        self.cmd.push(b'$');
        self.cmd
            .extend_from_slice(digits_of(len as u64, &mut digits));
        self.cmd.extend_from_slice(b"\r\n");
    }

    /// A number argument, written whole at once: `$<len>\r\n<n>\r\n`
    /// (most of a call's words are numbers; measured: a third of a call's
    /// encoding). The usual small number (an offence, a flag, a rule's
    /// count: half of a call's numbers are below 100) as a word of fixed
    /// length, inline where it is called (measured: the call and its
    /// frame were a third of its cost); a larger one made right to left
    /// in one stack buffer, then one copy.
    #[inline]
    pub fn num(&mut self, n: u64) -> &mut Self {
        self.word_written();
        if n < 10 {
            let d = b'0' + n as u8;
            self.cmd
                .extend_from_slice(&[b'$', b'1', b'\r', b'\n', d, b'\r', b'\n']);
        } else if n < 100 {
            let [tens, ones] = two_digits(n as usize);
            let word = [b'$', b'2', b'\r', b'\n', tens, ones, b'\r', b'\n'];
            self.cmd.extend_from_slice(&word);
        } else {
            self.large_num(n);
        }
        self
    }

    /// [`ScriptCall::num`] of 100 or more: its digits written once, its
    /// length's (3 to 20) in a fixed write before them.
    #[inline(never)]
    fn large_num(&mut self, n: u64) {
        // At most `$20\r\n` and 20 digits and `\r\n`: 27 bytes.
        let mut word = [0u8; 28];
        let end = word.len() - 2;
        word[end..].copy_from_slice(b"\r\n");
        let digits = digits_before(&mut word, end, n);
        let len = end - digits;
        let start = match len {
            // (`$<len>\r\n`, one digit: 100 to 999,999,999.)
            0..=9 => {
                let start = digits - 4;
                word[start..digits].copy_from_slice(&[b'$', b'0' + len as u8, b'\r', b'\n']);
                start
            }
            _ => {
                let start = digits - 5;
                let [tens, ones] = two_digits(len);
                word[start..digits].copy_from_slice(&[b'$', tens, ones, b'\r', b'\n']);
                start
            }
        };
        self.cmd.extend_from_slice(&word[start..]);
    }

    /// The call's deadline, last: [`clock::NO_DEADLINE`] until its
    /// connection stamps it in Redis's clock (`clock::stamp`).
    pub fn deadline(&mut self) -> &mut Self {
        self.word_written();
        self.cmd.extend_from_slice(clock::NO_DEADLINE_WORD);
        self
    }

    /// The encoded command, and where the part [`eval`] reuses starts.
    pub fn finish(self) -> (Vec<u8>, usize) {
        // (Unit tests run in release: checked there too; wrapping, so
        // that a word too many is caught as well as one too few.)
        #[cfg(any(debug_assertions, test))]
        assert_eq!(self.left, 0, "as many words as announced");
        (self.cmd, self.shared)
    }

    /// One word fewer to write (counted in debug builds and unit tests
    /// only).
    #[inline(always)]
    fn word_written(&mut self) {
        self.words_written(1);
    }

    /// `n` words fewer to write.
    #[inline(always)]
    fn words_written(&mut self, n: usize) {
        #[cfg(any(debug_assertions, test))]
        {
            self.left = self.left.wrapping_sub(n);
        }
        #[cfg(not(any(debug_assertions, test)))]
        let _ = n;
    }
}

/// The two digits of `n`, 10 to 99 (the usual word's length, a call's
/// usual count of words, a small number).
#[inline(always)]
fn two_digits(n: usize) -> [u8; 2] {
    debug_assert!((10..100).contains(&n));
    [b'0' + (n / 10) as u8, b'0' + (n % 10) as u8]
}

/// The capacity a call is written in: a check of one limit with its
/// breaker is some 470 bytes.
pub(crate) const CALL_CAPACITY: usize = 640;

/// The capacity words made once are written in
/// ([`ScriptCall::words`]): a stacked call's arguments of two limits are
/// some 100 bytes.
const WORDS_CAPACITY: usize = 128;

/// Where a key lies in the call that wrote it ([`ScriptCall::key`]).
#[derive(Clone, Copy, Debug)]
struct KeyWord {
    at: usize,
    /// Its whole word: header, name and `\r\n`.
    len: usize,
    /// Its tail's letter, if its tail has one (two bytes or more).
    letter_at: Option<usize>,
}

/// The same call as `EVAL <script>`, from a finished EVALSHA and its
/// `shared` offset.
pub fn eval(evalsha: &[u8], shared: usize, script: &str) -> Vec<u8> {
    // `*<n>\r\n` stays: EVAL takes as many words.
    let count = evalsha
        .iter()
        .position(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let rest = evalsha.get(shared..).unwrap_or_default();
    let mut out = Vec::with_capacity(count + script.len() + rest.len() + 24);
    out.extend_from_slice(&evalsha[..count]);
    bulk(&mut out, b"EVAL");
    bulk(&mut out, script.as_bytes());
    out.extend_from_slice(rest);
    out
}

/// One RESP bulk string (its header from a stack buffer, the whole
/// reserved at once).
fn bulk(out: &mut Vec<u8>, data: &[u8]) {
    // (A script's SHA: 40 bytes.)
    if data.len() == 40 {
        out.reserve(4 + 1 + 40 + 2);
        out.extend_from_slice(b"$40\r\n");
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
        return;
    }
    let mut head = [0u8; 24];
    let mut digits = [0u8; 20];
    let len = digits_of(data.len() as u64, &mut digits);
    head[0] = b'$';
    head[1..=len.len()].copy_from_slice(len);
    let end = 1 + len.len();
    head[end..end + 2].copy_from_slice(b"\r\n");
    out.reserve(end + 2 + data.len() + 2);
    out.extend_from_slice(&head[..end + 2]);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// `n` in decimal: several per command, so without `core::fmt`'s
/// machinery (measured: a good part of the module's CPU per request).
pub fn decimal(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(digits_of(n, &mut [0u8; 20]));
}

/// `n`'s decimal digits, written at the end of `buf`.
fn digits_of(n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let at = digits_before(buf, 20, n);
    &buf[at..]
}

pub(crate) mod digits;
pub(crate) use digits::digits_before;
mod spare;
pub use spare::give_back;
mod wide;
pub use wide::{widened, Wide, WideKeys, WIDE};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::command::encode;

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    fn sample() -> (Vec<u8>, usize) {
        let mut call = ScriptCall::new(SHA, 2, 3);
        call.push(|w| w.extend_from_slice(b"pow:{6162}:w:10:60000"))
            .push(|w| w.extend_from_slice(b""))
            .num(10)
            .num(60_000)
            .push(|w| w.extend_from_slice(b"a:b:c"));
        call.finish()
    }

    #[test]
    fn evalsha_encodes_as_the_generic_encoder_does() {
        let mut expected = Vec::new();
        encode(
            &mut expected,
            &[
                b"EVALSHA",
                SHA.as_bytes(),
                b"2",
                b"pow:{6162}:w:10:60000",
                b"",
                b"10",
                b"60000",
                b"a:b:c",
            ],
        );
        assert_eq!(sample().0, expected);
    }

    #[test]
    fn numbers_and_words_of_every_length_encode_as_the_generic_encoder_does() {
        let long = vec![b'k'; 1234];
        let numbers = [
            0,
            9,
            10,
            99,
            100,
            999,
            1000,
            9_999,
            10_000,
            65_535,
            u64::from(u32::MAX),
            1_765_000_000_123,
            u64::MAX,
        ];
        let mut call = ScriptCall::new(SHA, 1, numbers.len() + 6);
        call.push(|w| w.extend_from_slice(&long));
        let words: Vec<Vec<u8>> = [1, 9, 10, 99, 100].iter().map(|n| vec![b'w'; *n]).collect();
        for word in &words {
            call.push(|w| w.extend_from_slice(word));
        }
        for n in numbers {
            call.num(n);
        }
        call.push(|w| w.extend_from_slice(b""));
        let text: Vec<String> = numbers.iter().map(u64::to_string).collect();
        let mut expected_words: Vec<&[u8]> = vec![b"EVALSHA", SHA.as_bytes(), b"1", &long];
        expected_words.extend(words.iter().map(|w| w.as_slice()));
        let mut words = expected_words;
        words.extend(text.iter().map(|t| t.as_bytes()));
        words.push(b"");
        let mut expected = Vec::new();
        encode(&mut expected, &words);
        assert_eq!(call.finish().0, expected);
    }

    #[test]
    fn keys_written_whole_encode_as_pushed_keys_of_every_length() {
        let long = vec![b'p'; 120];
        for (prefix, tag, tail, other) in [
            (
                &b"pow:"[..],
                &b"@203.0.113.7"[..],
                &b":w:60:60000"[..],
                &b":o:60:60000"[..],
            ),
            (b"p", b"t", b":s", b":t"),
            // An empty `prefix=`; a 64-byte prefix and a hashed 44-byte
            // tag; a `slot=net` client's tag.
            (b"", b"t", b":w:5:60000", b":o:5:60000"),
            (&[b'p'; 64], &[b'#'; 44], b":a:5:60000", b":o:5:60000"),
            (b"", b"#h}{@203.0.113.7", b":s", b":u"),
            (&long, b"x", b":u", b":c"),
        ] {
            let mut whole = ScriptCall::new(SHA, 3, 0);
            let letters = [other, tail].map(|t| t.get(1).copied().unwrap_or(0));
            whole.keys_differing(prefix, tag, tail, &letters);
            let mut pushed = ScriptCall::new(SHA, 3, 0);
            for end in [tail, other, tail] {
                pushed.push(|w| {
                    w.extend_from_slice(prefix);
                    w.push(b'{');
                    w.extend_from_slice(tag);
                    w.push(b'}');
                    w.extend_from_slice(end);
                });
            }
            assert_eq!(whole.finish(), pushed.finish());
        }
    }

    #[test]
    fn a_calls_start_encodes_as_its_words_at_every_count_and_sha_length() {
        // 9, 10, 99 and 100 words: either side of the start written in
        // fixed writes (10 to 99 words, a 40-byte SHA).
        for sha_len in [0, 1, 39, 40, 41] {
            let sha = "a".repeat(sha_len);
            for words in [4, 9, 10, 11, 98, 99, 100, 101] {
                let (keys, args) = (1, words - 4);
                let mut call = ScriptCall::new(&sha, keys, args);
                call.push(|w| w.extend_from_slice(b"k"));
                for n in 0..args {
                    call.num(n as u64);
                }
                let text: Vec<String> = (0..args).map(|n| n.to_string()).collect();
                let mut expected_words: Vec<&[u8]> = vec![b"EVALSHA", sha.as_bytes(), b"1", b"k"];
                expected_words.extend(text.iter().map(|t| t.as_bytes()));
                let mut expected = Vec::new();
                encode(&mut expected, &expected_words);
                assert_eq!(
                    call.finish().0,
                    expected,
                    "{words} words, a {sha_len}-byte SHA"
                );
            }
        }
    }

    #[test]
    fn keys_differing_encode_as_pushed_keys_across_the_two_digit_lengths() {
        // Keys of 8 to 101 bytes: 9, 10, 99 and 100 among them.
        for tag_len in 0..=95 {
            let tag = vec![b't'; tag_len];
            let mut whole = ScriptCall::new(SHA, 3, 0);
            whole.keys_differing(b"p:", &tag, b":s", b"tu");
            let mut pushed = ScriptCall::new(SHA, 3, 0);
            for end in [b":s", b":t", b":u"] {
                pushed.push(|w| {
                    w.extend_from_slice(b"p:{");
                    w.extend_from_slice(&tag);
                    w.push(b'}');
                    w.extend_from_slice(end);
                });
            }
            assert_eq!(whole.finish(), pushed.finish(), "a {tag_len}-byte tag");
        }
    }

    #[test]
    fn eval_resend_is_the_same_call_with_the_script_text() {
        let (evalsha, shared) = sample();
        let mut expected = Vec::new();
        let script = "return {1}\r\n-- $5 *3";
        encode(
            &mut expected,
            &[
                b"EVAL",
                script.as_bytes(),
                b"2",
                b"pow:{6162}:w:10:60000",
                b"",
                b"10",
                b"60000",
                b"a:b:c",
            ],
        );
        assert_eq!(eval(&evalsha, shared, script), expected);
    }

    #[test]
    fn decimal_writes_every_digit() {
        let tens = (0..20).map(|e| 10u64.pow(e));
        let near = tens.flat_map(|t| [t - 1, t, t + 1, t + 5, t.saturating_mul(2) - 1]);
        let more = [
            60_000,
            1005,
            101,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ];
        for n in near.chain(more) {
            let mut out = b"x".to_vec();
            decimal(&mut out, n);
            assert_eq!(out, format!("x{n}").into_bytes());
        }
    }

    #[test]
    fn more_than_nine_words_count_in_decimal() {
        let mut call = ScriptCall::new(SHA, 4, 8);
        for n in 0..12 {
            call.num(n);
        }
        let (cmd, _) = call.finish();
        assert!(cmd.starts_with(b"*15\r\n$7\r\nEVALSHA\r\n$40\r\n"));
    }
}

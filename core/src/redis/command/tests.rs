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
fn an_integer_array_read_in_one_pass_is_what_the_general_path_reads() {
    let cases: &[&[u8]] = &[
        b"*11\r\n:1\r\n:4\r\n:60000\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n:1765000000123456\r\n",
        b"*16\r\n:0\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n:6\r\n:7\r\n:8\r\n:9\r\n:10\r\n:11\r\n:12\r\n:13\r\n:14\r\n:15\r\n",
        b"*17\r\n:0\r\n",
        b"*2\r\n:-1\r\n:-0\r\n+OK\r\n",
        b"*2\r\n:9223372036854775807\r\n:-9223372036854775808\r\n",
        b"*1\r\n:9223372036854775808\r\n",
        b"*1\r\n:-9223372036854775809\r\n",
        b"*2\r\n:9999999999999999999\r\n:-9999999999999999999\r\n",
        b"*1\r\n:-0000000000000000009\r\n",
        b"*1\r\n:+5\r\n",
        b"*1\r\n:-\r\n",
        b"*1\r\n:\r\n",
        b"*1\r\n:1\n2\r\n",
        b"*1\r\n:1\r\r\n",
        b"*1\r\n:1x\r\n",
        b"*2\r\n:1\r\n$1\r\nx\r\n",
        b"*2\r\n:1\r\n*1\r\n:1\r\n",
        b"*0\r\n",
        b"*00\r\n",
        b"*01\r\n:7\r\n",
        b"*-1\r\n",
        b"*1\n:1\r\n",
        b":5\r\n",
    ];
    // A line longer than MAX_LINE is corrupt however the reads split it,
    // padded with zeros or not.
    let mut long = b"*1\r\n:".to_vec();
    long.extend(std::iter::repeat_n(b'0', MAX_LINE));
    long.extend_from_slice(b"7\r\n");
    let mut padded = b"*1\r\n:".to_vec();
    padded.extend(std::iter::repeat_n(b'0', 30));
    padded.extend_from_slice(b"7\r\n");
    let cases: Vec<&[u8]> = cases
        .iter()
        .copied()
        .chain([&long[..], &padded[..]])
        .collect();
    assert!(matches!(decode_reply(&long), Decoded::Corrupt(_)));
    // What the one-pass path itself reads (the comparison alone would pass
    // were it never taken).
    for (case, ints) in [
        (cases[0], 11),
        (cases[1], 16),
        (cases[4], 2),
        (cases[17], 0),
        (cases[19], 1),
        (cases[8], 1),
    ] {
        let read = integer_array(case, &mut Rooms::default()).map(|(ints, len)| (ints.len(), len));
        assert_eq!(
            read,
            Some((ints, case.len())),
            "{}",
            String::from_utf8_lossy(case)
        );
    }
    for case in cases {
        // Every prefix too: an incomplete array waits (or is corrupt) alike.
        for end in 0..=case.len() {
            let buf = &case[..end];
            match (decode_reply(buf), scan_then_decode(buf)) {
                (Decoded::Corrupt(_), Decoded::Corrupt(_)) => {}
                (ours, theirs) => assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(buf)),
            }
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
        (Array((0..17).map(Integer).collect()), None),
        (Integer(1), None),
        (Null, None),
    ];
    for (frame, expected) in cases {
        let read = Frame::from(frame.clone());
        assert_eq!(read.integers().map(<[i64]>::to_vec), expected, "{frame:?}");
        // Held inline or not, it is the same reply.
        assert_eq!(read.as_owned().as_ref(), &frame);
        assert_eq!(read.into_owned(), frame);
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
    let reply = b"*11\r\n:1\r\n:4\r\n:60000\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n";
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
    assert_eq!(
        first,
        Frame::Other(OwnedFrame::SimpleString(b"OK".to_vec()))
    );
    assert_eq!(used, 5);
    assert_eq!(
        decode_reply(&buf[used..]),
        Decoded::Frame(Frame::Other(OwnedFrame::Null), 5)
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
    assert_eq!(f.integers(), Some(&[1, -5][..]));
    let Decoded::Frame(f, _) = decode_reply(b"*2\r\n:1\r\n$1\r\nx\r\n") else {
        panic!()
    };
    assert_eq!(f.integers(), None);
    let Decoded::Frame(f, _) = decode_reply(b":1\r\n") else {
        panic!()
    };
    assert_eq!(f.integers(), None);
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
    let reply = b"*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n*0\r\n";
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
    assert!(is_noscript(&Frame::Other(f)));
    assert!(!is_noscript(&Frame::Other(OwnedFrame::Error(
        "ERR wrong".into()
    ))));
}

#[test]
fn replies_read_together_are_each_read_whole() {
    // A read of several replies decodes them all before any is read.
    let replies: [&[u8]; 4] = [
        b"*11\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n:6\r\n:7\r\n:8\r\n:9\r\n:10\r\n:11\r\n",
        b"*2\r\n:40\r\n:50\r\n",
        b"*16\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n:6\r\n:7\r\n:8\r\n:9\r\n:10\r\n:11\r\n:12\r\n:13\r\n:14\r\n:15\r\n:16\r\n",
        b"*3\r\n:-1\r\n:0\r\n:1\r\n",
    ];
    let together = replies.concat();
    let mut rest = &together[..];
    let mut frames = Vec::new();
    while let Decoded::Frame(frame, len) = decode_reply(rest) {
        frames.push(frame);
        rest = &rest[len..];
    }
    assert!(rest.is_empty());
    let expected: Vec<Vec<i64>> = vec![
        (1..=11).collect(),
        vec![40, 50],
        (1..=16).collect(),
        vec![-1, 0, 1],
    ];
    let read: Vec<Vec<i64>> = frames
        .iter()
        .map(|f| f.integers().map(<[i64]>::to_vec).unwrap_or_default())
        .collect();
    assert_eq!(read, expected);
    // Read into the boxes of those before: a shorter array holds none of
    // a longer one's integers; an incomplete one leaves its box as it was.
    let mut rooms = Rooms::default();
    frames.into_iter().for_each(|f| rooms.give_back(f));
    for reply in [replies[1], b"*3\r\n:1\r\n", replies[3], replies[0]] {
        assert_eq!(decode_reply_in(reply, &mut rooms), decode_reply(reply));
    }
    let Decoded::Frame(Frame::Integers(ints), _) = decode_reply_in(replies[1], &mut rooms) else {
        panic!("integers");
    };
    assert_eq!(*ints, Ints::of(&[40, 50]).unwrap_or_default());
    assert_eq!(&ints[..], [40, 50]);
}

#[test]
fn a_one_digit_line_is_read_as_the_general_path_reads_it_whatever_its_second_byte() {
    // The one-word read of `:<digit>\r\n` takes digits alone: any other
    // byte there reads as the general path reads it (`:` or `?`: corrupt).
    for b in 0..=255u8 {
        for tail in [&b"\r\n"[..], b"\r\n:1\r\n"] {
            let case = [&b"*1\r\n:"[..], &[b], tail].concat();
            match (decode_reply(&case), scan_then_decode(&case)) {
                (Decoded::Corrupt(_), Decoded::Corrupt(_)) => {}
                (ours, theirs) => assert_eq!(ours, theirs, "{case:?}"),
            }
        }
    }
}

#[test]
fn one_digit_lines_read_two_at_a_time_are_what_the_general_path_reads() {
    // Any byte in either digit's place (a one-digit line, two, or none).
    for (a, b) in (0..=255u8).flat_map(|a| (0..=255u8).map(move |b| (a, b))) {
        let case = [&b"*3\r\n:"[..], &[a], b"\r\n:", &[b], b"\r\n:7\r\n"].concat();
        match (decode_reply(&case), scan_then_decode(&case)) {
            (Decoded::Corrupt(_), Decoded::Corrupt(_)) => {}
            (ours, theirs) => assert_eq!(ours, theirs, "{case:?}"),
        }
    }
    let read = integer_array(
        b"*5\r\n:1\r\n:2\r\n:34\r\n:5\r\n:6\r\n",
        &mut Rooms::default(),
    );
    assert_eq!(
        read.map(|(ints, len)| (ints.to_vec(), len)),
        Some((vec![1, 2, 34, 5, 6], 25))
    );
}

mod pair;

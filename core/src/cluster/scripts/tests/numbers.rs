//! What the scripts rely on to pass Redis strings rather than Lua numbers
//! (`deadline.lua`: a Lua number passed to `redis.call` is formatted with
//! "%.17g"): Redis's clock made as a string from TIME's two strings is the
//! ms the arithmetic gives, whatever the microseconds' digits; and what the
//! scripts write as strings reads back as the same integers.

use redis_protocol::resp2::types::OwnedFrame;

use super::ints;
use super::redis_server::Redis;
use crate::cluster::scripts::Scripts;

/// `clock_ms` of `deadline.lua` with TIME answering `{seconds, micros}`
/// (a local `redis` shadowing the global one, as t/'s clocked scripts do):
/// its number (formatted with `%d`) and its string.
fn clock_at(redis: &mut Redis, seconds: &str, micros: &str) -> (String, String) {
    let script = format!(
        "local real = redis\n\
         local redis = setmetatable({{call = function(cmd, ...)\n\
           if cmd == 'TIME' then return {{ARGV[1], ARGV[2]}} end\n\
           return real.call(cmd, ...)\n\
         end}}, {{__index = real}})\n\
         {}\n\
         local n, s = clock_ms()\n\
         return {{string.format('%d', n), s}}",
        include_str!("../deadline.lua")
    );
    let reply = redis.call(&[
        b"EVAL",
        script.as_bytes(),
        b"0",
        seconds.as_bytes(),
        micros.as_bytes(),
        b"0",
    ]);
    match reply {
        OwnedFrame::Array(items) => match items.as_slice() {
            [OwnedFrame::BulkString(n), OwnedFrame::BulkString(s)] => (
                String::from_utf8(n.clone()).unwrap(),
                String::from_utf8(s.clone()).unwrap(),
            ),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[test]
fn redis_clock_as_a_string_is_the_ms_the_arithmetic_gives() {
    let Some(mut redis) = Redis::connect("numbers::clock") else {
        return;
    };
    // (TIME's microseconds come without leading zeros: "2500" is 2.5 ms.)
    for (seconds, micros) in [
        (1_765_000_000u64, 0u64),
        (1_765_000_000, 7),
        (1_765_000_000, 999),
        (1_765_000_000, 1_000),
        (1_765_000_000, 2_500),
        (1_765_000_000, 99_999),
        (1_765_000_000, 100_000),
        (1_765_000_000, 999_999),
        (1_000_000, 250),
    ] {
        let want = (seconds * 1000 + micros / 1000).to_string();
        let (n, s) = clock_at(&mut redis, &seconds.to_string(), &micros.to_string());
        assert_eq!((&n, &s), (&want, &want), "TIME {seconds} {micros}");
    }
    // Redis's own TIME: the same ms both ways.
    let script = format!(
        "{}\nlocal n, s = clock_ms()\nreturn {{string.format('%d', n), s}}",
        include_str!("../deadline.lua")
    );
    // (`clock_ms` reads the deadline too, the last argument: 0, none.)
    let reply = redis.call(&[b"EVAL", script.as_bytes(), b"0", b"0"]);
    let OwnedFrame::Array(items) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(items[0], items[1]);
}

#[test]
fn an_approx_counter_and_a_log_hold_plain_integers_and_expire() {
    let Some(mut redis) = Redis::connect("numbers::written") else {
        return;
    };
    let scripts = Scripts::for_mode(false);
    let p = format!("numbers-test:{}:{{c}}", std::process::id());
    let keys = |kind: &str| {
        vec![
            format!("{p}:{kind}:5:60000"),
            format!("{p}:o:5:60000"),
            format!("{p}:s"),
            format!("{p}:t"),
            format!("{p}:u"),
        ]
    };
    let args = |member: &str| {
        ["5", "60000", member, "1", "5", "60000", "0", "0", "1"]
            .map(String::from)
            .to_vec()
    };
    for (script, kind) in [(&scripts.approx, "a"), (&scripts.window, "w")] {
        for remaining in [4, 3] {
            let member = format!("m{remaining}");
            let reply = ints(&redis.eval(script, &keys(kind), &args(&member)));
            assert_eq!(&reply[..2], &[1, remaining], "{}", script.name);
        }
        let pttl = redis.call(&[b"PTTL", keys(kind)[0].as_bytes()]);
        assert!(
            matches!(pttl, OwnedFrame::Integer(ms) if ms > 0 && ms <= 120_000),
            "{}: {pttl:?}",
            script.name
        );
    }
    let fields = redis.call(&[b"HMGET", keys("a")[0].as_bytes(), b"i", b"c", b"p"]);
    let OwnedFrame::Array(fields) = fields else {
        panic!("{fields:?}")
    };
    let text: Vec<String> = fields
        .iter()
        .map(|f| match f {
            OwnedFrame::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(text[0].bytes().all(|b| b.is_ascii_digit()), "{text:?}");
    assert_eq!(&text[1..], ["2", "0"]);
    // Each admission's score is the ms it came at, an integer.
    let scores = redis.call(&[
        b"ZRANGE",
        keys("w")[0].as_bytes(),
        b"0",
        b"-1",
        b"WITHSCORES",
    ]);
    let OwnedFrame::Array(scores) = scores else {
        panic!("{scores:?}")
    };
    assert_eq!(scores.len(), 4, "two admissions");
    for score in scores.iter().skip(1).step_by(2) {
        let OwnedFrame::BulkString(b) = score else {
            panic!("{score:?}")
        };
        assert!(b.len() == 13 && b.iter().all(u8::is_ascii_digit), "{b:?}");
    }
}

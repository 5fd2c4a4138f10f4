//! A client new to a limit, on a real Redis: the cheap path a check takes
//! for it (`window_check`'s fresh admission: one EXISTS for the breaker's
//! counters and the log, then the admission and its expiry) costs Redis
//! three calls, and answers every client that only looks new as before:
//! each of the keys it skips reading, alone, still decides.

use redis_protocol::resp2::types::OwnedFrame;

use super::checks::RULES;
use super::redis_server::Redis;
use super::{ints, shape};
use crate::cluster::calls::{checks_reply, Calls, CheckOf};
use crate::cluster::keys::{self, ClientKey};
use crate::limiter::{Limits, RateLimit};
use crate::redis::command::client_tag;
use crate::store::{Offence, Subject, CLIENT_KEYS};

const W: i64 = 60_000;

const fn limit(requests: u32) -> RateLimit {
    RateLimit {
        requests,
        window_ms: 60_000,
    }
}

/// `BANNED_TRIPS`: a ban written by any location.
const BANNED: i64 = 65_535;

/// One client: what Redis holds of it before its check (the log's
/// entries, then the counters), where it is checked, and the reply both
/// check scripts must give (times cut to whether they are set: `shape`).
struct Row {
    name: &'static str,
    log: u32,
    held: &'static [(ClientKey<'static>, i64)],
    limit: RateLimit,
    offence: Offence,
    reply: [i64; 10],
}

const fn row(
    name: &'static str,
    log: u32,
    held: &'static [(ClientKey<'static>, i64)],
    limit: RateLimit,
    offence: Offence,
    reply: [i64; 10],
) -> Row {
    Row {
        name,
        log,
        held,
        limit,
        offence,
        reply,
    }
}

const NEW: [i64; 10] = [1, 1, 1, 0, 0, 0, 0, 0, 0, 0];

/// Every key the fresh path does not read, alone (and the new client).
const ROWS: [Row; 9] = [
    row("new", 0, &[], limit(2), Offence::Unpaid, NEW),
    row(
        "trips alone: banned",
        0,
        &[(ClientKey::Trips, BANNED)],
        limit(2),
        Offence::Unpaid,
        [0, 0, 0, 0, 0, 0, 2, 1, 0, 0],
    ),
    row(
        "strikes alone: one short of the block",
        0,
        &[(ClientKey::Strikes, 1)],
        limit(2),
        Offence::Unpaid,
        [1, 1, 1, 0, 0, 1, 0, 0, 0, 0],
    ),
    row(
        "strikes alone: blocked",
        0,
        &[(ClientKey::Strikes, 2)],
        limit(2),
        Offence::Unpaid,
        [0, 0, 0, 0, 0, 2, 1, 1, 0, 0],
    ),
    row(
        "a 429 waited out: its strike and refusal taken back",
        0,
        &[
            (ClientKey::Strikes, 1),
            (ClientKey::Unpaid, 1),
            (ClientKey::Refused(limit(2)), 1),
        ],
        limit(2),
        Offence::Unpaid,
        NEW,
    ),
    row(
        "refusals alone, a paid request's check: priced from them",
        0,
        &[(ClientKey::Refused(limit(2)), 3)],
        limit(2),
        Offence::None,
        [1, 1, 1, 0, 3, 0, 0, 0, 0, 0],
    ),
    row(
        "refusals alone, a limit of one: none left, priced from them",
        0,
        &[(ClientKey::Refused(limit(1)), 3)],
        limit(1),
        Offence::Unpaid,
        [1, 0, 1, 0, 3, 0, 0, 0, 0, 0],
    ),
    row(
        "refusals alone, requests left: not read",
        0,
        &[(ClientKey::Refused(limit(2)), 3)],
        limit(2),
        Offence::Unpaid,
        NEW,
    ),
    row(
        "a log: the last request left, priced from the refusals",
        1,
        &[(ClientKey::Refused(limit(2)), 3)],
        limit(2),
        Offence::Unpaid,
        [1, 0, 1, 0, 3, 0, 0, 0, 0, 0],
    ),
];

fn name(prefix: &str, tag: &str, which: ClientKey) -> Vec<u8> {
    let mut out = Vec::new();
    keys::write(&mut out, prefix.as_bytes(), tag.as_bytes(), which);
    out
}

/// Writes what `row` says Redis holds of client `tag`.
fn hold(redis: &mut Redis, prefix: &str, tag: &str, row: &Row) {
    let now = redis.now_ms().to_string();
    for i in 0..row.log {
        let log = name(prefix, tag, ClientKey::Window(row.limit));
        let member = format!("before.{i}");
        redis.call(&[b"ZADD", &log, now.as_bytes(), member.as_bytes()]);
    }
    for (which, value) in row.held {
        let key = name(prefix, tag, *which);
        let value = value.to_string();
        redis.call(&[b"SET", &key, value.as_bytes(), b"PX", b"60000"]);
    }
}

fn window_call(calls: &Calls, tag: &str, row: &Row, seq: u64) -> Vec<u8> {
    let limits = Limits::one(row.limit);
    let subject = Subject {
        key: tag.as_bytes(),
        limits: &limits,
        key_values: CLIENT_KEYS,
        rules: RULES,
        rising: false,
    };
    calls
        .check(tag.as_bytes(), &subject, row.offence, 1, seq)
        .evalsha
}

fn checks_call(calls: &Calls, tags: &[String], rows: &[&Row], seq: u64) -> Vec<u8> {
    let of: Vec<CheckOf> = tags
        .iter()
        .zip(rows)
        .map(|(tag, row)| CheckOf {
            tag: tag.as_bytes(),
            limit: row.limit,
            rules: RULES,
            offence: row.offence,
        })
        .collect();
    calls.checks(&of, seq).evalsha
}

#[test]
fn a_client_that_only_looks_new_is_answered_by_the_keys_the_fresh_path_skips() {
    for cluster in [false, true] {
        let test = format!("fresh_rows_{cluster}");
        let Some((mut redis, alone, together)) = super::alone_and_together(&test, "fresh", cluster)
        else {
            return;
        };
        let tags: Vec<String> = (0..ROWS.len())
            .map(|i| client_tag(format!("row {i}").as_bytes()))
            .collect();
        for (tag, row) in tags.iter().zip(&ROWS) {
            hold(&mut redis, alone.prefix(), tag, row);
            hold(&mut redis, together.prefix(), tag, row);
        }
        let rows: Vec<&Row> = ROWS.iter().collect();
        let frame = redis.raw(&checks_call(&together, &tags, &rows, 1));
        let OwnedFrame::BulkString(text) = &frame else {
            panic!("{frame:?}");
        };
        let limits: Vec<RateLimit> = ROWS.iter().map(|r| r.limit).collect();
        let gathered = checks_reply(text, &limits, cluster).expect("a reply each");
        for (i, (tag, row)) in tags.iter().zip(&ROWS).enumerate() {
            let mine = ints(&redis.raw(&window_call(&alone, tag, row, 100 + i as u64)));
            assert_eq!(shape(&mine[..10]), row.reply, "{}: window script", row.name);
            assert_eq!(
                shape(&gathered[i][..10]),
                row.reply,
                "{}: checks script",
                row.name
            );
            if cluster {
                // The slot's generation, after a refusal (a block too).
                assert_eq!(mine[10] > 0, row.reply[0] == 0, "{}", row.name);
            }
        }
        // A reset or block time is a window or the block's at most.
        assert!(gathered.iter().all(|r| r[2] <= W && r[7] <= W));
    }
}

/// The script `text` with every `redis.call` recorded: it replies with
/// its own reply and the commands it ran, in order, one string.
fn recorded(text: &str) -> String {
    format!(
        "local rcall, ran = redis.call, {{}}\n\
         local redis = setmetatable({{call = function(c, ...)\n\
           ran[#ran + 1] = c\n\
           return rcall(c, ...)\n\
         end}}, {{__index = redis}})\n\
         local function body()\n{text}\nend\n\
         return {{body(), table.concat(ran, ' ')}}\n"
    )
}

/// Runs `call` (an EVALSHA of `sha1`) as the recorded script: the reply
/// and the commands it ran.
fn run_recorded(redis: &mut Redis, call: &[u8], sha1: &str, text: &str) -> (OwnedFrame, String) {
    let OwnedFrame::BulkString(sha) = redis.call(&[b"SCRIPT", b"LOAD", recorded(text).as_bytes()])
    else {
        panic!("the recorded script does not load");
    };
    let at = call
        .windows(sha1.len())
        .position(|w| w == sha1.as_bytes())
        .expect("the call names its script");
    let mut call = call.to_vec();
    call[at..at + sha.len()].copy_from_slice(&sha);
    match redis.raw(&call) {
        OwnedFrame::Array(mut two) if two.len() == 2 => {
            let Some(OwnedFrame::BulkString(ran)) = two.pop() else {
                panic!("{two:?}");
            };
            let reply = two.pop().expect("a reply");
            (reply, String::from_utf8(ran).expect("command names"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_new_clients_check_costs_redis_one_exists_one_zadd_and_one_expiry() {
    let Some(mut redis) = Redis::connect("fresh_calls") else {
        return;
    };
    let prefix = format!("fresh-calls-test:{}:", std::process::id());
    let calls = Calls::new(&prefix, 7, 1, false);
    let new = &ROWS[0];
    let scripts = crate::cluster::scripts::Scripts::for_mode(false);

    let call = window_call(&calls, &client_tag(b"alone"), new, 1);
    let (reply, ran) = run_recorded(&mut redis, &call, &scripts.window.sha1, scripts.window.text);
    assert_eq!(shape(&ints(&reply)), NEW);
    assert_eq!(ran, "EXISTS TIME ZADD PEXPIRE", "the window script");

    let tags = [client_tag(b"first"), client_tag(b"second")];
    let call = checks_call(&calls, &tags, &[new, new], 2);
    let (reply, ran) = run_recorded(&mut redis, &call, &scripts.checks.sha1, scripts.checks.text);
    assert_eq!(reply, OwnedFrame::BulkString(b"n n".to_vec()));
    assert_eq!(
        ran, "TIME EXISTS ZADD PEXPIREAT EXISTS ZADD PEXPIREAT",
        "the checks script: the clock once, three calls a client (the \
         expiry's time formatted once)"
    );
    // Each log expires a window after its admission, as PEXPIRE's would.
    for tag in &tags {
        let log = name(&prefix, tag, ClientKey::Window(new.limit));
        let OwnedFrame::Integer(ttl) = redis.call(&[b"PTTL", &log]) else {
            panic!("PTTL");
        };
        assert!((W - 1_000..=W).contains(&ttl), "{ttl} ms");
    }
}

#[test]
fn a_strike_reads_the_counters_with_one_mget_and_no_exists() {
    let Some(mut redis) = Redis::connect("fresh_strike_calls") else {
        return;
    };
    let prefix = format!("fresh-strike-test:{}:", std::process::id());
    let calls = Calls::new(&prefix, 7, 1, false);
    let scripts = crate::cluster::scripts::Scripts::for_mode(false);
    let tag = client_tag(b"struck");
    // A client with a strike already: only a check, which may find a new
    // client, asks EXISTS first; a strike reads what is there.
    redis.call(&[b"SET", &name(&prefix, &tag, ClientKey::Strikes), b"1"]);
    let call = calls.strike(tag.as_bytes(), RULES);
    let (reply, ran) = run_recorded(
        &mut redis,
        &call.evalsha,
        &scripts.strike.sha1,
        scripts.strike.text,
    );
    assert!(matches!(reply, OwnedFrame::Array(_)), "{reply:?}");
    assert!(ran.starts_with("MGET "), "the strike script ran: {ran}");
    assert!(!ran.contains("EXISTS"), "the strike script ran: {ran}");
}

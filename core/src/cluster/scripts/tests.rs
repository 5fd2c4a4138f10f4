//! The scripts: how each is put together, what it answers on a real Redis
//! (`redis_server`), and the same requests asked of the Rust model
//! (`tables`, run by `bench`); their replies' decoding (`decoding`); calls
//! Redis runs after their deadline (`late`); what a new client costs and
//! the clients that only look new (`fresh`); the numbers the scripts pass
//! Redis as strings (`numbers`).

mod bench;
mod checks;
mod counting;
mod decoding;
mod fresh;
mod generations;
mod late;
mod numbers;
pub(crate) mod redis_server;
mod stacks;
mod tables;

use super::*;
use crate::cluster::calls::Calls;
use crate::redis::url::parse_redis_url;
use redis_protocol::resp2::types::OwnedFrame;

/// A gathered call compared with the same checks sent alone: a Redis for
/// `test`, and two `Calls` with their scripts loaded, each under its own
/// key prefix (`<what>-test:<pid>:<cluster>:alone:` and `...:together:`):
/// the first sends each check alone, the second all in one call.
fn alone_and_together(
    test: &str,
    what: &str,
    cluster: bool,
) -> Option<(redis_server::Redis, Calls, Calls)> {
    let mut redis = redis_server::Redis::connect(test)?;
    let pid = std::process::id();
    let [alone, together] = ["alone", "together"].map(|how| {
        Calls::new(
            &format!("{what}-test:{pid}:{cluster}:{how}:"),
            7,
            1,
            cluster,
        )
    });
    load(&mut redis, &alone);
    Some((redis, alone, together))
}

/// A late call's test: a Redis for `test`, and `Calls` under the prefix
/// `<what>-test:<pid>:late:` with their scripts loaded.
fn late_calls(test: &str, what: &str, cluster: bool) -> Option<(redis_server::Redis, Calls)> {
    let mut redis = redis_server::Redis::connect(test)?;
    let prefix = format!("{what}-test:{}:late:", std::process::id());
    let calls = Calls::new(&prefix, 7, 1, cluster);
    load(&mut redis, &calls);
    Some((redis, calls))
}

/// Every script of `calls`' mode, loaded (as a connection's handshake).
fn load(redis: &mut redis_server::Redis, calls: &Calls) {
    for script in calls.scripts() {
        redis.call(&[b"SCRIPT", b"LOAD", script.as_bytes()]);
    }
}

/// An array reply's integers.
fn ints(frame: &OwnedFrame) -> Vec<i64> {
    match frame {
        OwnedFrame::Array(items) => items
            .iter()
            .map(|f| match f {
                OwnedFrame::Integer(i) => *i,
                other => panic!("not an integer: {other:?}"),
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// A reply's integers with its times (reset, retry, block ms) cut to
/// whether they are set: the calls compared run a few ms apart.
fn shape(reply: &[i64]) -> Vec<i64> {
    reply
        .iter()
        .enumerate()
        .map(|(i, v)| match i {
            2 | 3 | 7 => i64::from(*v > 0),
            _ => *v,
        })
        .collect()
}

#[test]
fn each_mode_holds_every_script_once_and_only_one_redis_its_generation_script_and_only_a_cluster_its_undo(
) {
    let one = Scripts::for_mode(false);
    let cluster = Scripts::for_mode(true);
    assert!(!one.cluster && cluster.cluster);
    let names = |s: &Scripts| s.iter().map(|s| s.name).collect::<Vec<_>>();
    assert_eq!(
        names(one),
        [
            "window",
            "approx",
            "stacked",
            "checks",
            "strike",
            "spend",
            "gen_spend",
            "batch",
            "generation"
        ]
    );
    assert_eq!(
        names(cluster),
        [
            "window",
            "approx",
            "stacked",
            "checks",
            "strike",
            "spend",
            "gen_spend",
            "batch",
            "undo",
            "count",
            "counts",
            "standing"
        ]
    );
    assert!(cluster.generation.is_none() && one.undo.is_none());
    for s in one.iter().chain(cluster.iter()) {
        assert_eq!(s.sha1, script_sha1(s.text));
        assert_eq!(s.sha1.len(), 40);
    }
    assert!(
        std::ptr::eq(Scripts::for_mode(true), cluster),
        "one set per mode"
    );
    assert_eq!(one.check(true).name, "approx");
}

/// The code of one part, as the composer keeps it (`kept_lines`).
fn code(part: &str) -> String {
    let text = format!("-\n{part}");
    let mut out = vec![0; kept_lines(text.as_bytes(), None)];
    kept_lines(text.as_bytes(), Some(&mut out));
    String::from_utf8(out[2..].to_vec()).unwrap()
}

#[test]
fn the_modes_differ_only_in_the_checks_end_and_the_generation_spends_guard() {
    let (one, cluster) = (Scripts::for_mode(false), Scripts::for_mode(true));
    for (a, b) in [
        (&one.strike, &cluster.strike),
        (&one.spend, &cluster.spend),
        (&one.batch, &cluster.batch),
        (&one.checks, &cluster.checks),
    ] {
        assert_eq!(a.sha1, b.sha1, "{}", a.name);
    }
    let (reply, slot_reply) = (
        code(include_str!("reply.lua")),
        code(include_str!("slot_reply.lua")),
    );
    // A Redis Cluster's one-limit check makes the slot's generation after
    // a refusal: its rare paths' functions (`rare.lua`) end with those.
    let rare_end = code(include_str!("rare_end.lua"));
    let slot = [
        code(include_str!("generations.lua")),
        code(include_str!("new_generation.lua")),
        code(include_str!("slot_generation.lua")),
    ]
    .concat();
    for (a, b, slot) in [
        (&one.window, &cluster.window, slot.as_str()),
        (&one.approx, &cluster.approx, slot.as_str()),
        (&one.stacked, &cluster.stacked, ""),
    ] {
        assert!(a.text.ends_with(&reply) && b.text.ends_with(&slot_reply));
        let check = &a.text[..a.text.len() - reply.len()];
        assert_eq!(check.matches(&rare_end).count(), 1, "{}", a.name);
        let check = check.replacen(&rare_end, &format!("{slot}{rare_end}"), 1);
        assert_eq!(
            &b.text[..b.text.len() - slot_reply.len()],
            check,
            "{}: the same check",
            a.name
        );
    }
    assert!(one.window.text.contains(&code(include_str!("window.lua"))));
    assert!(one
        .gen_spend
        .text
        .ends_with(&code(include_str!("spend.lua"))));
    assert!(one
        .gen_spend
        .text
        .contains(&code(include_str!("gen_guard.lua"))));
    assert!(cluster
        .gen_spend
        .text
        .contains(&code(include_str!("slot_gen_guard.lua"))));
}

#[test]
fn every_shared_part_is_written_once_and_the_scripts_read_redis_time_never_random() {
    let one = Scripts::for_mode(false);
    let breaker = code(include_str!("breaker.lua"));
    for s in one.iter() {
        assert_eq!(
            s.text.contains(&breaker),
            s.name != "generation",
            "{}",
            s.name
        );
    }
    assert!(one.stacked.text.contains(&code(include_str!("log.lua"))));
    assert!(one
        .stacked
        .text
        .contains(&code(include_str!("counter.lua"))));
    assert!(
        !one.approx.text.contains("ZADD"),
        "O(1) state: no sorted set"
    );
    for s in one.iter().chain(Scripts::for_mode(true).iter()) {
        assert!(!s.text.contains("math.random"), "{}", s.name);
        assert!(
            s.text.matches("redis.call('TIME')").count() <= 2,
            "{}",
            s.name
        );
        assert!(
            s.text.starts_with("-- pow-shield: "),
            "{}: its title",
            s.name
        );
        assert!(
            !s.text[1..].contains("\n--") && !s.text.contains("\n\n"),
            "code only"
        );
    }
}

#[test]
fn every_connection_loads_every_script_of_its_mode_in_under_96_kb() {
    // (A part script missing on a Redis Cluster master would go as EVAL,
    // which loses its ASKING on a slot being migrated.)
    for cluster in [false, true] {
        let calls = Calls::new("p:", 7, 1, cluster);
        let target = parse_redis_url("redis://127.0.0.1:6379").expect("a URL");
        let handshake = calls.handshake(&target);
        let loaded = handshake.iter().filter(|(name, _)| *name == "SCRIPT LOAD");
        assert_eq!(loaded.count(), calls.scripts().count(), "cluster {cluster}");
        let bytes: usize = calls.scripts().map(str::len).sum();
        assert!(bytes < 96 * 1024, "cluster {cluster}: {bytes} bytes");
    }
}

/// Whether `text` calls `name` (as `name(`, `R.name(`, `r.name(` or
/// `rare().name(`) other than where `def` defines it.
fn calls(text: &str, name: &str, def: &str) -> bool {
    let called = format!("{name}(");
    text.match_indices(&called).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let word = before.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !word && !text[..at + called.len()].ends_with(def)
    })
}

#[test]
fn each_script_defines_only_functions_it_calls_and_its_rare_paths_only_when_taken() {
    // Redis runs a script's body at every call: each function it defines
    // (`local function` at its top) is a closure made at every call, and
    // collected after. The rare paths' (`rare.lua`) are made only when a
    // call takes one.
    let rare = [
        "strike_n",
        "waited",
        "refuse",
        "log_retry",
        "approx_retry",
        "count_refused",
        "run_id",
        "new_generation",
        "slot_generation",
    ];
    for s in Scripts::for_mode(false)
        .iter()
        .chain(Scripts::for_mode(true).iter())
    {
        for line in s.text.lines() {
            let (def, name) = if let Some(rest) = line.strip_prefix("local function ") {
                ("local function ", rest)
            } else if let Some(rest) = line.strip_prefix("function R.") {
                ("function R.", rest)
            } else {
                continue;
            };
            let name = &name[..name.find('(').expect("a function's arguments")];
            let def = format!("{def}{name}(");
            assert!(
                calls(s.text, name, &def),
                "{}: {name} defined, never called",
                s.name
            );
            assert!(
                !(def.starts_with("local") && rare.contains(&name)),
                "{}: {name}, only a rare path's, made at every call",
                s.name
            );
        }
        assert_eq!(
            s.text.contains("function R."),
            s.text.contains("local function rare()"),
            "{}",
            s.name
        );
    }
}

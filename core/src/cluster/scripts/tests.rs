//! The scripts: how each is put together, what it answers on a real Redis
//! (`redis_server`), and the same requests asked of the Rust model
//! (`tables`, run by `bench`); their replies' decoding (`decoding`).

mod bench;
mod decoding;
mod generations;
mod redis_server;
mod tables;

use super::*;

#[test]
fn each_mode_holds_every_script_once_and_only_one_redis_its_generation_script() {
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
            "strike",
            "spend",
            "gen_spend",
            "batch",
            "generation"
        ]
    );
    assert_eq!(names(cluster).len(), 7);
    assert!(cluster.generation.is_none());
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

#[test]
fn the_modes_differ_only_in_the_checks_end_and_the_generation_spends_guard() {
    let (one, cluster) = (Scripts::for_mode(false), Scripts::for_mode(true));
    for (a, b) in [
        (&one.strike, &cluster.strike),
        (&one.spend, &cluster.spend),
        (&one.batch, &cluster.batch),
    ] {
        assert_eq!(a.sha1, b.sha1, "{}", a.name);
    }
    let window = include_str!("window.lua");
    for (a, b) in [
        (&one.window, &cluster.window),
        (&one.stacked, &cluster.stacked),
    ] {
        assert!(a.text.contains(window) || a.name == "stacked");
        assert!(a.text.ends_with(include_str!("reply.lua")));
        assert!(b.text.ends_with(include_str!("slot_reply.lua")));
        let shared = a.text.len() - include_str!("reply.lua").len();
        assert!(
            b.text.contains(&a.text[..shared]),
            "{}: the same check",
            a.name
        );
    }
    assert!(one.gen_spend.text.ends_with(include_str!("spend.lua")));
    assert!(cluster
        .gen_spend
        .text
        .contains(include_str!("slot_gen_guard.lua")));
}

#[test]
fn every_shared_part_is_written_once_and_the_scripts_read_redis_time_never_random() {
    let one = Scripts::for_mode(false);
    for s in one.iter() {
        let breaker = s.text.contains(include_str!("breaker.lua"));
        assert_eq!(breaker, s.name != "generation", "{}", s.name);
    }
    assert!(one.stacked.text.contains(include_str!("log.lua")));
    assert!(one.stacked.text.contains(include_str!("counter.lua")));
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
    }
}

//! The generation scripts on a real Redis (no Rust model: what they keep is
//! Redis's own run id and clock).

use redis_protocol::resp2::types::OwnedFrame;

use super::redis_server::Redis;
use crate::cluster::scripts::replies::checked_from_reply;
use crate::cluster::scripts::Scripts;
use crate::limiter::RateLimit;

const ONE: RateLimit = RateLimit {
    requests: 1,
    window_ms: 60_000,
};

fn text(frame: OwnedFrame) -> String {
    match frame {
        OwnedFrame::BulkString(v) => String::from_utf8(v).unwrap(),
        other => panic!("{other:?}"),
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The window script's call, one request (`Scripts::window`), with the
/// slot's generation key last when `gen_key`.
fn check_args(p: &str, gen_key: Option<&str>) -> (Vec<String>, Vec<String>) {
    let mut keys: Vec<String> = ["w", "o", "s", "t", "u"]
        .iter()
        .map(|k| format!("{p}:{k}"))
        .collect();
    keys.extend(gen_key.map(str::to_owned));
    let args = strings(&["1", "60000", "m", "1", "0", "0", "0", "0", "1"]);
    (keys, args)
}

#[test]
fn one_redis_keeps_its_generation_until_another_run_writes_it() {
    let Some(mut redis) = Redis::connect("generation") else {
        return;
    };
    let scripts = Scripts::for_mode(false);
    let generation = scripts.generation.as_ref().unwrap();
    let key = strings(&["t:gen:one"]);
    redis.call(&[b"DEL", b"t:gen:one"]);
    let first = text(redis.eval(generation, &key, &strings(&["111"])));
    assert!(first.ends_with(":111") && first.len() == 40 + 4, "{first}");
    let again = text(redis.eval(generation, &key, &strings(&["222"])));
    assert_eq!(again, first, "kept");
    redis.call(&[b"SET", b"t:gen:one", b"otherrun:5"]);
    let renewed = text(redis.eval(generation, &key, &strings(&["333"])));
    assert!(renewed.ends_with(":333"), "another run's: renewed");

    // The spend runs only within it.
    let p = "t:gen:spend";
    let keys: Vec<String> = ["x", "s", "t", "u", "one", "c"]
        .iter()
        .map(|k| {
            if *k == "one" {
                "t:gen:one".to_owned()
            } else {
                format!("{p}:{k}")
            }
        })
        .collect();
    let args = |gen: &str| strings(&["60000", "0", "0", "0", "0", "0", gen]);
    assert_eq!(
        redis.ints(&scripts.gen_spend, &keys, &args("332")),
        [-1, 0, 0, 0]
    );
    assert_eq!(
        redis.ints(&scripts.gen_spend, &keys, &args("333")),
        [1, 0, 0, 0]
    );
    assert_eq!(
        redis.ints(&scripts.gen_spend, &keys, &args("333")),
        [0, 0, 0, 0]
    );
}

#[test]
fn a_redis_cluster_check_answers_the_slots_generation_only_when_it_refuses() {
    let Some(mut redis) = Redis::connect("slot_generation") else {
        return;
    };
    let scripts = Scripts::for_mode(true);
    let (p, gk) = ("t:gen:slot", "t:gen:slot:gen");
    redis.call(&[b"DEL", gk.as_bytes(), b"t:gen:slot:w", b"t:gen:slot:o"]);
    let (keys, args) = check_args(p, Some(gk));
    let admitted = redis.ints(&scripts.window, &keys, &args);
    assert_eq!((admitted.len(), admitted[10]), (11, 0));
    assert_eq!(
        redis.call(&[b"GET", gk.as_bytes()]),
        OwnedFrame::Null,
        "nothing read"
    );
    let refused = redis.ints(&scripts.window, &keys, &args);
    let checked = checked_from_reply(&refused, ONE, true).unwrap();
    let gen = checked.generation.expect("made");
    assert!(text(redis.call(&[b"GET", gk.as_bytes()])).ends_with(&format!(":{gen}")));
    let again = checked_from_reply(&redis.ints(&scripts.window, &keys, &args), ONE, true);
    assert_eq!(
        again.unwrap().generation,
        Some(gen),
        "the same while it lasts"
    );

    // The slot's spend: a token of another generation is told the slot's.
    let spend_keys: Vec<String> = vec![
        format!("{p}:x"),
        format!("{p}:s"),
        format!("{p}:t"),
        format!("{p}:u"),
        gk.to_owned(),
        format!("{p}:c"),
    ];
    let args = |gen: &str| strings(&["60000", "0", "0", "0", "0", "0", gen]);
    let stale = redis.ints(&scripts.gen_spend, &spend_keys, &args("1"));
    assert_eq!(stale, [-1, 0, 0, 0, gen as i64]);
    let spent = redis.ints(&scripts.gen_spend, &spend_keys, &args(&gen.to_string()));
    assert_eq!(spent, [1, 0, 0, 0]);
    // Written by another run: renewed, and the new one answered.
    redis.call(&[b"SET", gk.as_bytes(), b"otherrun:5"]);
    let renewed = redis.ints(&scripts.gen_spend, &spend_keys, &args("5"));
    assert_eq!(renewed[..4], [-1, 0, 0, 0]);
    assert!(renewed[4] > gen as i64, "Redis's clock in us, later");

    // The approx and stacked checks end the same way.
    let (keys, args) = check_args("t:gen:slot:approx", Some(gk));
    assert_eq!(redis.ints(&scripts.approx, &keys, &args)[10], 0);
    assert_eq!(redis.ints(&scripts.approx, &keys, &args)[10], renewed[4]);
    let keys: Vec<String> = ["s", "t", "u", "w", "o"]
        .iter()
        .map(|k| format!("t:gen:slot:stacked:{k}"))
        .chain([gk.to_owned()])
        .collect();
    let args = strings(&["m", "1", "0", "0", "0", "0", "0", "1", "1", "60000"]);
    assert_eq!(redis.ints(&scripts.stacked, &keys, &args)[10], 0);
    assert_eq!(redis.ints(&scripts.stacked, &keys, &args)[10], renewed[4]);
}

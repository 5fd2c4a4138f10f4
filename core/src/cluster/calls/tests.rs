//! What each operation sends, word by word (the scripts' KEYS and ARGV
//! contracts: `cluster::scripts::Scripts`), and what their replies mean.

use super::*;
use crate::cluster::scripts::script_sha1;
use crate::limiter::breaker::{BanRule, StrikeRule};
use crate::limiter::Limits;

fn one() -> &'static Scripts {
    Scripts::for_mode(false)
}

fn sharded() -> &'static Scripts {
    Scripts::for_mode(true)
}

const LIMIT: RateLimit = RateLimit {
    requests: 5,
    window_ms: 60_000,
};

const RULES: BreakerRules = BreakerRules {
    strikes: Some(StrikeRule {
        threshold: 3,
        ttl_ms: 600_000,
    }),
    ban: Some(BanRule {
        after: 2,
        ttl_ms: 86_400_000,
    }),
};

/// The words of an encoded RESP array.
fn words(command: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(command).into_owned();
    let mut lines = text.split("\r\n");
    let n: usize = lines.next().unwrap()[1..].parse().unwrap();
    let mut out = Vec::new();
    for _ in 0..n {
        let _len = lines.next().unwrap();
        out.push(lines.next().unwrap().to_owned());
    }
    out
}

/// Kept for the test's length (a subject borrows what it names).
pub(crate) fn kept<'a, T: 'a>(value: T) -> &'a T {
    Box::leak(Box::new(value))
}

/// `limits`, every one `approx` if `approx`.
fn counting(limits: Limits, approx: bool) -> Limits {
    let mut out = Limits::NONE;
    for limit in limits.as_slice() {
        let limit = match approx {
            true => limit.approx(),
            false => *limit,
        };
        out.add(limit).unwrap();
    }
    out
}

fn subject<'a>(key: &'a [u8], limits: Limits, approx: bool) -> Subject<'a> {
    Subject {
        key,
        limits: kept(counting(limits, approx)),
        key_values: crate::store::CLIENT_KEYS,
        rules: RULES,
        rising: false,
    }
}

fn tail(call: &Call, skip: usize) -> Vec<String> {
    words(&call.evalsha)[skip..].to_vec()
}

#[test]
fn a_check_sends_its_keys_then_the_limit_member_offence_and_rules() {
    let calls = Calls::new("ps:", 0xab, 7, false);
    let s = subject(b"10.0.0.1", Limits::one(LIMIT), false);
    let call = calls.check(b"t", &s, Offence::Unpaid, 1, 9);
    let w = words(&call.evalsha);
    assert_eq!(w[0], "EVALSHA");
    assert_eq!(w[1], one().window.sha1);
    assert_eq!(w[2], "5", "five keys on one Redis");
    assert_eq!(call.script, one().window.text);
    // limit, window, member, offence, the four rules, how many requests
    // it decides, and last the deadline its connection stamps.
    assert_eq!(
        tail(&call, 8),
        [
            "5",
            "60000",
            "ab:7:9",
            "1",
            "3",
            "600000",
            "2",
            "86400000",
            "1",
            "0000000000000"
        ]
    );
    // A coalesced burst says how many requests it decides.
    let burst = calls.check(b"t", &s, Offence::Unpaid, 4, 10);
    let w = words(&burst.evalsha);
    assert_eq!(w[w.len() - 2], "4");
    assert_eq!(w.len(), words(&call.evalsha).len());
}

#[test]
fn the_script_of_each_check_is_chosen_by_the_mode_and_the_limits() {
    let single = Calls::new("ps:", 1, 1, false);
    let cluster = Calls::new("ps:", 1, 1, true);
    let exact = subject(b"k", Limits::one(LIMIT), false);
    let approx = subject(b"k", Limits::one(LIMIT), true);
    let mut two = Limits::one(LIMIT);
    two.push(
        RateLimit {
            requests: 100,
            window_ms: 3_600_000,
        },
        None,
    )
    .unwrap();
    let stacked_subject = subject(b"k", two, false);
    #[rustfmt::skip]
    let table: [(&Calls, &Subject, &str, &str); 6] = [
        (&single, &exact, one().window.text, "5"),
        (&single, &approx, one().approx.text, "5"),
        (&single, &stacked_subject, one().stacked.text, "7"),
        (&cluster, &exact, sharded().window.text, "6"),
        (&cluster, &approx, sharded().approx.text, "6"),
        (&cluster, &stacked_subject, sharded().stacked.text, "8"),
    ];
    for (i, (calls, s, script, keys)) in table.into_iter().enumerate() {
        let call = calls.check(b"t", s, Offence::None, 1, 1);
        assert_eq!(call.script, script, "row {i}");
        let w = words(&call.evalsha);
        assert_eq!(w[1], script_sha1(script), "row {i}");
        assert_eq!(w[2], keys, "row {i}: keys");
        assert!(calls.scripts().any(|s| s == script), "row {i}: loaded");
    }
}

#[test]
fn a_spend_in_a_generation_names_the_generation_key_and_passes_it_last() {
    let single = Calls::new("ps:", 1, 1, false);
    let solution = Solution {
        digest: [3; 32],
        spent_until_ms: 10_500,
        generation: Some(42),
        forgive: true,
        retry_at_ms: None,
    };
    let spent = single.spent_key(&solution.digest, b"k");
    let plain = single.spend(&spent, b"t", &solution, RULES, None, 10_000);
    let w = words(&plain.evalsha);
    assert_eq!(plain.script, one().spend.text);
    assert_eq!(w[2], "6");
    assert_eq!(w[3], spent);
    assert_eq!(w[7], w[8], "no generation: the paid key again");
    assert_eq!(
        tail(&plain, 9),
        ["500", "3", "600000", "2", "86400000", "0", "0000000000000"]
    );
    let in_gen = single.spend(&spent, b"t", &solution, RULES, Some(42), 10_000);
    assert_eq!(in_gen.script, one().gen_spend.text);
    let w = words(&in_gen.evalsha);
    assert_eq!(w[7], "ps:gen");
    assert_eq!(w[w.len() - 2], "42", "the generation, then the deadline");
    // A token whose 429 struck nothing takes nothing back.
    let unstruck = Solution {
        forgive: false,
        retry_at_ms: None,
        ..solution
    };
    let w = words(
        &single
            .spend(&spent, b"t", &unstruck, RULES, None, 10_000)
            .evalsha,
    );
    // (the last word is the call's deadline)
    assert_eq!(w[w.len() - 2], "2");
    // One whose 429's Retry-After (its `ra`) has ended by the spend: a
    // wait may have taken its strike back.
    let waited = Solution {
        retry_at_ms: Some(10_000),
        ..solution
    };
    let mode = |now_ms| {
        let call = single.spend(&spent, b"t", &waited, RULES, None, now_ms);
        let w = words(&call.evalsha);
        w[w.len() - 2].clone()
    };
    assert_eq!((mode(9_999), mode(10_000)), ("0".into(), "4".into()));
    // A Redis Cluster: the slot's generation.
    let cluster = Calls::new("ps:", 1, 1, true);
    let w = words(
        &cluster
            .spend(&spent, b"t", &solution, RULES, Some(42), 10_000)
            .evalsha,
    );
    assert!(w[7].starts_with("ps:"), "{}", w[7]);
    assert_ne!(w[7], "ps:gen");
}

#[test]
fn a_replay_is_written_whatever_the_breaker_says() {
    let calls = Calls::new("ps:", 1, 1, false);
    let call = calls.replay("ps:spent", b"t", 0);
    assert_eq!(call.script, one().spend.text);
    // Decided (1), one unpaid strike back if held, never owed (4).
    assert_eq!(
        tail(&call, 7),
        ["1", "0", "0", "0", "0", "5", "0000000000000"]
    );
    assert!(call.eval().starts_with(b"*14\r\n$4\r\nEVAL\r\n"));
}

#[test]
fn a_batch_carries_each_clients_keys_then_each_clients_numbers() {
    let calls = Calls::new("ps:", 1, 1, false);
    let sending = Sending {
        run: 11,
        total: 4,
        base: 2,
    };
    let batch = BatchOf {
        tag: b"t",
        limit: LIMIT,
        rules: RULES,
        sending,
    };
    let call = calls.batch(&[batch, batch]);
    let w = words(&call.evalsha);
    assert_eq!(w[2], "12");
    assert_eq!(
        w[15..23],
        ["4", "60000", "3", "600000", "2", "86400000", "11", "2"]
    );
    assert_eq!(w.len(), 3 + 12 + 16 + 1, "and the deadline last");
}

#[test]
fn a_check_reply_says_whether_it_struck() {
    let one = Limits::one(LIMIT);
    let check = |reply: &[i64], offence| checked(false, reply, &one, RULES, offence);
    let refused = [0, 0, 100, 100, 1, 1, 0, 0, 0, 1];
    let answer = check(&refused, Offence::Unpaid).unwrap();
    assert!(!answer.verdict.allowed);
    assert!(answer.struck);
    // The script says whether it struck (a paid refusal strikes nothing).
    let unstruck = [0, 0, 100, 100, 1, 1, 0, 0, 0, 0];
    assert!(!check(&unstruck, Offence::None).unwrap().struck);
    let blocked = [0, 0, 0, 0, 0, 3, 1, 5_000, 0, 0];
    assert!(!check(&blocked, Offence::Unpaid).unwrap().struck);
    assert_eq!(check(&[1, 2], Offence::None), None);
    // A Redis Cluster's reply ends with the slot's generation.
    let with_slot = [0, 0, 100, 100, 1, 1, 0, 0, 0, 1, 77];
    let answer = checked(true, &with_slot, &one, RULES, Offence::Unpaid).unwrap();
    assert_eq!(answer.generation, Some(77));
    // A Redis Cluster loads no single generation script.
    assert!(Calls::new("ps:", 1, 1, true).generation(5).is_none());
    assert!(Calls::new("ps:", 1, 1, false).generation(5).is_some());
}

/// 5 a minute per client, 100 an hour per network (`key=`).
fn keyed<'a>(net: &'a [u8]) -> Subject<'a> {
    let mut limits = Limits::one(LIMIT);
    let hourly = RateLimit {
        requests: 100,
        window_ms: 3_600_000,
    };
    let id = Some(crate::limiter::KeyId::of("$pow_shield_net"));
    limits.push_keyed(hourly, None, id).unwrap();
    let mut s = subject(b"10.0.0.1", limits, false);
    s.key_values = kept([None, Some(net)]);
    s
}

#[test]
fn a_keyed_limit_goes_in_the_stacked_call_under_its_own_tag() {
    let calls = Calls::new("ps:", 1, 1, false);
    let only_keyed = {
        let mut s = keyed(b"10.0.0.0/24");
        s.limits = kept(s.limits.only(|i| i == 1).0);
        s.key_values = kept([Some(&b"10.0.0.0/24"[..])]);
        s
    };
    assert_eq!(single_limit(&only_keyed), None, "one keyed limit: stacked");
    let call = calls.check(b"t", &keyed(b"10.0.0.0/24"), Offence::Unpaid, 1, 1);
    let w = words(&call.evalsha);
    assert_eq!(call.script, one().stacked.text);
    assert_eq!(w[2], "7", "the breaker's 3, then 2 per limit");
    let net = keys::own_tag(b"10.0.0.0/24");
    assert_eq!(w[6], "ps:{t}:w:5:60000", "the client's log under its tag");
    assert_eq!(w[8], format!("ps:{{{net}}}:w:100:3600000"), "the network's");
    assert_eq!(w[9], format!("ps:{{{net}}}:o:100:3600000"));
    assert_ne!(net, crate::redis::command::client_tag(b"10.0.0.0/24"));
}

#[test]
fn an_empty_key_value_leaves_its_limit_out_of_the_call_and_the_reply_names_the_others() {
    let calls = Calls::new("ps:", 1, 1, false);
    let out = keyed(b"");
    let call = calls.check(b"t", &out, Offence::Unpaid, 1, 1);
    assert_eq!(words(&call.evalsha)[2], "5", "one limit sent, stacked");
    let (kept, at) = counted(&out);
    assert_eq!((kept.len(), at[0]), (1, 0));
    // A refusal by the network's limit, the second sent and written.
    let both = keyed(b"10.0.0.0/24");
    let (kept, at) = counted(&both);
    let reply = [0, 0, 1_000, 1_000, 1, 1, 0, 0, 0, 1];
    let checked = stacked_checked(false, &reply, (&kept, &at), RULES, Offence::Unpaid).unwrap();
    assert_eq!((checked.verdict.allowed, checked.verdict.limit), (false, 1));
    // Counted by none: admitted, the breaker as Redis says.
    let (none, at) = both.limits.only(|_| false);
    let reply = [1, 0, 0, 0, 0, 2, 0, 0, 0, 0];
    let checked = stacked_checked(false, &reply, (&none, &at), RULES, Offence::Unpaid).unwrap();
    assert!(checked.verdict.allowed);
    assert_eq!(checked.breaker.strikes, 2);
}

#[test]
fn every_call_that_writes_ends_with_a_deadline_to_stamp() {
    let calls = Calls::new("ps:", 1, 1, false);
    let s = subject(b"k", Limits::one(LIMIT), false);
    let solution = Solution {
        digest: [3; 32],
        spent_until_ms: 10_500,
        generation: Some(42),
        forgive: true,
        retry_at_ms: None,
    };
    let batch = BatchOf {
        tag: b"t",
        limit: LIMIT,
        rules: RULES,
        sending: Sending {
            run: 1,
            total: 1,
            base: 0,
        },
    };
    for (what, call) in [
        ("check", calls.check(b"t", &s, Offence::Unpaid, 1, 1)),
        ("strike", calls.strike(b"t", RULES)),
        ("spend", calls.spend("x", b"t", &solution, RULES, None, 0)),
        (
            "gen spend",
            calls.spend("x", b"t", &solution, RULES, Some(42), 0),
        ),
        ("replay", calls.replay("x", b"t", 1)),
        ("batch", calls.batch(&[batch])),
    ] {
        let mut cmd = call.evalsha.clone();
        assert!(
            crate::redis::clock::stamp(&mut cmd, 1_765_000_000_000),
            "{what}"
        );
        let mut eval = call.eval();
        assert!(crate::redis::clock::stamp(&mut eval, 1), "{what}: EVAL");
    }
}

#[test]
fn every_connection_authenticates_selects_loads_every_script_and_reads_the_clock_last() {
    use crate::redis::url::parse_redis_url;
    let calls = Calls::new("ps:", 1, 2, false);
    let loads = one().iter().count();
    // (URL, the commands' names in order)
    let table = [
        ("redis://127.0.0.1:6379", vec![]),
        ("redis://:secret@127.0.0.1:6379", vec!["AUTH"]),
        (
            "redis://user:secret@127.0.0.1:6379/2",
            vec!["AUTH", "SELECT"],
        ),
    ];
    for (url, first) in table {
        let target = parse_redis_url(url).expect("a URL");
        let handshake = calls.handshake(&target);
        let names: Vec<_> = handshake.iter().map(|(name, _)| *name).collect();
        let mut want = first.clone();
        want.extend(std::iter::repeat_n("SCRIPT LOAD", loads));
        want.push(crate::redis::pipeline::CLOCK_STEP);
        assert_eq!(names, want, "{url}");
        assert_eq!(words(&handshake.last().expect("TIME").1), ["TIME"], "{url}");
    }
    let target = parse_redis_url("redis://user:secret@127.0.0.1:6379/2").expect("a URL");
    let handshake = calls.handshake(&target);
    assert_eq!(words(&handshake[0].1), ["AUTH", "user", "secret"]);
    assert_eq!(words(&handshake[1].1), ["SELECT", "2"]);
}

/// A client's limit, then a network's and an AS's (`key=`).
fn client_net_and_as() -> Limits {
    use crate::limiter::{KeyId, Limit};
    let mut limits = Limits::NONE;
    limits.add(Limit::new(LIMIT)).unwrap();
    for (i, key) in ["$pow_shield_net", "$http_x_as"].into_iter().enumerate() {
        let rate = RateLimit {
            requests: 100 + i as u32,
            ..LIMIT
        };
        limits.add(Limit::new(rate).keyed(KeyId::of(key))).unwrap();
    }
    limits
}

#[test]
fn each_part_of_a_sharded_check_knows_its_routes_slot() {
    use crate::cluster::generation::slot_of_tag;
    let calls = Calls::new("ps:", 1, 1, true);
    let limits = client_net_and_as();
    for (client, values) in [
        (&b"c1"[..], [&b"n1"[..], b"as1"]),
        (b"c2", [b"n1", b"as2"]),
        (b"\x0a\x00\x00\x01", [b"10.0.0.0/24", b"AS64500"]),
    ] {
        let key_values: &[Option<&[u8]>] = kept([None, Some(values[0]), Some(values[1])]);
        let subject = Subject {
            key_values,
            ..subject(client, limits, false)
        };
        let tag = crate::redis::command::client_tag(client);
        let parts = calls.parts(tag.as_bytes(), &subject, Offence::Unpaid);
        assert_eq!(parts[0].route, tag.as_bytes());
        for part in &parts {
            assert_eq!(part.slot(), slot_of_tag(&part.route));
        }
        // A part made otherwise computes it.
        let whole = calls.whole(tag.as_bytes(), &subject, Offence::Unpaid);
        assert_eq!(whole.slot(), slot_of_tag(tag.as_bytes()));
    }
}

#[test]
fn an_empty_key_value_leaves_its_limit_out_of_every_part_of_a_sharded_check() {
    let calls = Calls::new("ps:", 1, 1, true);
    let limits = client_net_and_as();
    for (values, left_out) in [([&b""[..], b"AS64500"], 1), ([b"n1", b""], 2)] {
        let key_values: &[Option<&[u8]>] = kept([None, Some(values[0]), Some(values[1])]);
        let subject = Subject {
            key_values,
            ..subject(b"c1", limits, false)
        };
        let tag = crate::redis::command::client_tag(b"c1");
        let parts = calls.parts(tag.as_bytes(), &subject, Offence::Unpaid);
        let mut counted: Vec<u8> = parts
            .iter()
            .flat_map(|part| part.at[..part.limits_len()].to_vec())
            .collect();
        counted.sort_unstable();
        let expected: Vec<u8> = (0..3).filter(|&i| i != left_out).collect();
        assert_eq!(
            counted, expected,
            "{values:?}: each other limit in one part"
        );
    }
}

#[test]
fn each_part_reads_its_reply_by_its_own_limits_with_their_places_among_the_locations() {
    let calls = Calls::new("ps:", 1, 1, true);
    let limits = client_net_and_as();
    for values in [
        [&b"n1"[..], b"as1"],
        [b"10.0.0.0/24", b"AS64500"],
        [b"", b"AS64500"],
        [b"n1", b""],
    ] {
        let key_values: &[Option<&[u8]>] = kept([None, Some(values[0]), Some(values[1])]);
        let subject = Subject {
            key_values,
            ..subject(b"c1", limits, false)
        };
        let tag = crate::redis::command::client_tag(b"c1");
        for part in calls.parts(tag.as_bytes(), &subject, Offence::Unpaid) {
            // What the location's list cut to the part's places says.
            let n = part.limits_len();
            let (own, at) = limits.only(|i| part.at[..n].contains(&(i as u8)));
            assert_eq!((own.len(), &at[..n]), (n, &part.at[..n]), "{values:?}");
            for i in 0..=n {
                assert_eq!(part.rate(i), own.get(i), "{values:?} {i}");
                assert_eq!(part.is_keyed(i), own.is_keyed(i), "{values:?} {i}");
            }
            // A refusal by its last limit names the location's.
            let mut reply = [0, 0, 1_000, 1_000, 1, 0, 0, 0, 0, n as i64 - 1, 7];
            if n == 0 {
                reply[0] = 1;
                reply[9] = 0;
            }
            let by_part = part_checked(true, &reply, &part, false);
            let by_list = stacked_checked(true, &reply, (&own, &at), part.rules, part.offence);
            assert_eq!(by_part, by_list, "{values:?}");
        }
    }
}

#[test]
fn a_call_is_sent_as_evalsha_and_again_as_its_eval_only_if_redis_lost_the_script() {
    use crate::redis::pipeline::Resend;
    let calls = Calls::new("ps:", 1, 1, true);
    let call = calls.strike(b"t", RULES);
    let (evalsha, eval) = (call.evalsha.clone(), call.eval());
    assert_eq!(words(&eval)[0], "EVAL");
    let sent: Resend = std::rc::Rc::new(call);
    assert_eq!(sent.bytes(), &evalsha[..]);
    assert_eq!(sent.on_noscript(), Some(eval));
}

// (`stacks.rs`'s.)

#[test]
fn the_worst_stacks_reply_fits_a_bulk_string_the_node_accepts() {
    let each = crate::cluster::scripts::replies::STACKED_REPLY_LEN + 1;
    let worst = vec![i64::MIN.to_string(); each * MAX_GATHERED].join(" ");
    assert!(worst.len() <= crate::redis::command::MAX_BULK);
}

#[test]
fn a_stacks_reply_gives_each_request_the_stacked_scripts_integers() {
    let text = b"1 1 60000 0 0 0 0 0 0 1 0 0 0 900 1 1 0 0 0 0";
    assert_eq!(
        stacks_reply(text, 2, false),
        Some(vec![
            vec![1, 1, 60_000, 0, 0, 0, 0, 0, 0, 1],
            vec![0, 0, 0, 900, 1, 1, 0, 0, 0, 0],
        ])
    );
    let text = b"0 0 0 900 1 1 0 0 0 0 1765000000123456";
    assert_eq!(
        stacks_reply(text, 1, true),
        Some(vec![vec![
            0,
            0,
            0,
            900,
            1,
            1,
            0,
            0,
            0,
            0,
            1_765_000_000_123_456
        ]])
    );
    for (text, n) in [
        (&b"1 2"[..], 1),
        (b"", 1),
        (text, 2),
        (b"1 1 1 1 1 1 1 1 1 x", 1),
    ] {
        assert_eq!(stacks_reply(text, n, false), None);
    }
}

mod key_names;

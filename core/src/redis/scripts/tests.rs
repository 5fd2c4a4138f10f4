//! The scripts' texts and the decoding of their replies.

use super::*;
use crate::limiter::breaker::{Block, BreakerStatus, Tripped};
use crate::limiter::{RateLimit, Spent, Verdict};

const PER_MINUTE_60: RateLimit = RateLimit {
    requests: 60,
    window_ms: 60_000,
};

#[test]
fn admitted_reply_decodes_to_an_allowed_verdict() {
    let (v, breaker) =
        verdict_from_reply(&[1, 59, 60_000, 0, 0, 0, 0, 0, 0, 0], PER_MINUTE_60).unwrap();
    assert_eq!(breaker, BreakerStatus::default());
    assert_eq!(
        v,
        Verdict {
            allowed: true,
            remaining: 59,
            reset_after_ms: 60_000,
            retry_after_ms: 0,
            over: 0,
            limit: 0,
        }
    );
}

#[test]
fn sixty_first_request_reply_decodes_to_rejected_with_retry_after() {
    let (v, breaker) =
        verdict_from_reply(&[0, 0, 12_345, 12_345, 1, 1, 0, 0, 0, 0], PER_MINUTE_60).unwrap();
    assert!(!v.allowed);
    assert_eq!(v.remaining, 0);
    assert_eq!(v.retry_after_ms, 12_345);
    assert_eq!(v.over, 1);
    assert_eq!(breaker.strikes, 1);
    assert_eq!(breaker.block, Block::Clear);
}

#[test]
fn blocked_and_banned_replies_decode() {
    let (_, s) = verdict_from_reply(&[0, 0, 0, 0, 0, 5, 1, 900, 0, 0], PER_MINUTE_60).unwrap();
    assert_eq!((s.block, s.block_ms), (Block::Blocked, 900));
    let (_, s) = verdict_from_reply(&[0, 0, 0, 0, 0, 0, 2, 5, 0, 0], PER_MINUTE_60).unwrap();
    assert_eq!(s.block, Block::Banned);
    assert_eq!(
        verdict_from_reply(&[0, 0, 0, 0, 0, 0, 3, 0, 0, 0], PER_MINUTE_60),
        Err(ReplyError::OutOfRange { index: 6 })
    );
    assert_eq!(
        standing_from_reply(&[5, 0, 0, 2]),
        Ok(BreakerStatus {
            strikes: 5,
            block: Block::Clear,
            block_ms: 0,
            tripped: Some(Tripped::Banned),
        })
    );
    assert_eq!(
        standing_from_reply(&[4, 0, 0]),
        Err(ReplyError::WrongLength {
            len: 3,
            expected: 4
        })
    );
    assert_eq!(
        standing_from_reply(&[4, 0, 0, 3]),
        Err(ReplyError::OutOfRange { index: 3 })
    );
    let (_, s) = verdict_from_reply(&[0, 0, 0, 0, 1, 5, 0, 0, 1, 0], PER_MINUTE_60).unwrap();
    assert_eq!(s.tripped, Some(Tripped::Opened));
}

#[test]
fn spend_replies_decode() {
    assert_eq!(
        spent_from_reply(&[1, 2, 0, 0]),
        Ok(Spent::Accepted(BreakerStatus {
            strikes: 2,
            ..BreakerStatus::default()
        }))
    );
    assert_eq!(spent_from_reply(&[0, 3, 0, 0]), Ok(Spent::Replayed));
    assert_eq!(
        spent_from_reply(&[2, 5, 1, 900]),
        Ok(Spent::Blocked(BreakerStatus {
            strikes: 5,
            block: Block::Blocked,
            block_ms: 900,
            tripped: None,
        }))
    );
    assert_eq!(
        spent_from_reply(&[2, 5, 0, 0]),
        Err(ReplyError::OutOfRange { index: 2 })
    );
    assert_eq!(
        spent_from_reply(&[3, 0, 0, 0]),
        Err(ReplyError::OutOfRange { index: 0 })
    );
    assert!(spent_from_reply(&[1, 0, 0]).is_err());
}

#[test]
fn the_spend_takes_back_an_unpaid_strike_in_the_same_script_never_below_zero() {
    let spend = SPEND_SCRIPT.find("'SET', KEYS[1]").unwrap();
    let decr = SPEND_SCRIPT.find("'DECR', KEYS[2]").unwrap();
    assert!(spend < decr);
    assert!(SPEND_SCRIPT
        .contains("if strikes > 0 and tonumber(redis.call('GET', KEYS[4]) or 0) > 0 then"));
    assert!(SPEND_SCRIPT.contains("redis.call('DECR', KEYS[4])"));
    assert!(SPEND_SCRIPT.contains(breaker_lua!()));
}

#[test]
fn a_refusal_is_passed_as_0_nothing_1_unpaid_2_failed() {
    assert_eq!(offence(Offence::None), 0);
    assert_eq!(offence(Offence::Unpaid), 1);
    assert_eq!(offence(Offence::Failed), 2);
}

#[test]
fn only_a_429_is_an_unpaid_strike() {
    for script in [SLIDING_WINDOW_SCRIPT, APPROX_SCRIPT] {
        assert!(script.contains("ARGV[4] ~= '0'"));
        assert!(script.contains("ARGV[4] == '1')"));
    }
    assert!(STRIKE_SCRIPT.contains("threshold, ttl, after, ban, false)"));
}

#[test]
fn short_or_long_reply_is_an_error() {
    for reply in [
        &[][..],
        &[1, 59, 0],
        &[1, 59, 0, 0],
        &[1, 59, 0, 0, 0, 0, 0, 0, 0],
        &[1, 59, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ] {
        assert_eq!(
            verdict_from_reply(reply, PER_MINUTE_60),
            Err(ReplyError::WrongLength {
                len: reply.len(),
                expected: REPLY_LEN
            })
        );
    }
}

#[test]
fn negative_value_is_an_error_naming_its_position() {
    assert_eq!(
        verdict_from_reply(&[1, 59, -1, 0, 0, 0, 0, 0, 0, 0], PER_MINUTE_60),
        Err(ReplyError::Negative { index: 2 })
    );
}

#[test]
fn allowed_flag_other_than_0_or_1_is_an_error() {
    assert_eq!(
        verdict_from_reply(&[2, 59, 0, 0, 0, 0, 0, 0, 0, 0], PER_MINUTE_60),
        Err(ReplyError::OutOfRange { index: 0 })
    );
}

#[test]
fn remaining_above_the_limit_is_an_error() {
    assert_eq!(
        verdict_from_reply(&[1, 61, 0, 0, 0, 0, 0, 0, 0, 0], PER_MINUTE_60),
        Err(ReplyError::OutOfRange { index: 1 })
    );
}

#[test]
fn script_sha1_is_40_lower_case_hex_chars_and_stable() {
    let sha = script_sha1(SLIDING_WINDOW_SCRIPT);
    assert_eq!(sha.len(), 40);
    assert!(sha
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    assert_eq!(sha, script_sha1(SLIDING_WINDOW_SCRIPT));
    assert_ne!(sha, script_sha1(STRIKE_SCRIPT));
    assert_ne!(sha, script_sha1(APPROX_SCRIPT));
}

#[test]
fn script_reads_redis_time_never_random() {
    assert!(SLIDING_WINDOW_SCRIPT.contains("redis.call('TIME')"));
    assert!(!STRIKE_SCRIPT.contains("math.random"));
    assert!(!SLIDING_WINDOW_SCRIPT.contains("math.random"));
    assert!(APPROX_SCRIPT.contains("redis.call('TIME')"));
    assert!(!APPROX_SCRIPT.contains("math.random"));
}

#[test]
fn approx_script_keeps_o1_state_and_the_same_breaker() {
    // One hash of three fields per client, no sorted set, whatever the
    // limit; the breaker shared word for word with the exact script.
    assert!(APPROX_SCRIPT.contains("redis.call('HMGET', key, 'i', 'c', 'p')"));
    assert!(!APPROX_SCRIPT.contains("ZADD"));
    assert!(APPROX_SCRIPT.contains(breaker_lua!()));
    assert!(SLIDING_WINDOW_SCRIPT.contains(breaker_lua!()));
}

#[test]
fn members_differ_by_node_pid_and_sequence() {
    let member = |node, pid, seq| {
        let mut out = Vec::new();
        write_member(&mut out, node, pid, seq);
        String::from_utf8(out).unwrap()
    };
    let base = member(1, 2, 3);
    assert_eq!(base, "1:2:3");
    assert_ne!(base, member(2, 2, 3));
    assert_ne!(base, member(1, 3, 3));
    assert_ne!(base, member(1, 2, 4));
    assert_ne!(member(0x12, 3, 4), member(0x1, 0x23, 4));
    assert_eq!(
        member(u64::MAX, 0x10, 0),
        format!("{:x}:{:x}:{:x}", u64::MAX, 0x10, 0)
    );
    assert_eq!(member(0xabc0, 1, 0x7f), "abc0:1:7f");
}

#[test]
fn rules_are_four_integers_zero_when_off() {
    use crate::limiter::breaker::{BanRule, StrikeRule};
    assert_eq!(rules(BreakerRules::default()), [0, 0, 0, 0]);
    let on = BreakerRules {
        strikes: Some(StrikeRule {
            threshold: 5,
            ttl_ms: 60_000,
        }),
        ban: Some(BanRule {
            after: 3,
            ttl_ms: 86_400_000,
        }),
    };
    assert_eq!(rules(on), [5, 60_000, 3, 86_400_000]);
}

#[test]
fn batch_replies_decode_to_the_refusals_and_the_breaker_after_the_batch() {
    assert_eq!(
        batch_from_reply(&[12, 5, 1, 60_000, 1]),
        Ok((
            12,
            BreakerStatus {
                strikes: 5,
                block: Block::Blocked,
                block_ms: 60_000,
                tripped: Some(Tripped::Opened),
            }
        ))
    );
    assert_eq!(
        batch_from_reply(&[3, 0, 0, 0]),
        Err(ReplyError::WrongLength {
            len: 4,
            expected: 5
        })
    );
    assert_eq!(
        batch_from_reply(&[3, 0, 4, 0, 0]),
        Err(ReplyError::OutOfRange { index: 2 })
    );
}

#[test]
fn a_batch_is_applied_once_and_strikes_as_the_window_script_would() {
    // Only what the running total adds to what was applied of its run.
    assert!(BATCH_SCRIPT.contains("if fresh then"));
    assert!(BATCH_SCRIPT.contains("n = total - ltotal"));
    assert!(BATCH_SCRIPT.contains("if lrun and (lrun > run or (lrun == run and ltotal >= total))"));
    // An older call puts the newer record back.
    assert!(BATCH_SCRIPT.contains("redis.call('SET', KEYS[k + 5], last, 'PX', '600000')"));
    // Refusals in the window and unpaid strikes, n at once.
    assert!(BATCH_SCRIPT.contains("redis.call('INCRBY', KEYS[k + 1], n)"));
    assert!(BATCH_SCRIPT.contains("threshold, ttl, after, ban, n, true)"));
    // Not while blocked; the strike crossing the threshold trips.
    assert!(
        BATCH_SCRIPT.contains("if fresh and threshold > 0 and n > 0 then\n    if block == 0 then")
    );
    assert!(BATCH_SCRIPT.contains("if strikes < threshold or strikes - n >= threshold then"));
    assert!(BATCH_SCRIPT.contains(breaker_lua!()));
    assert_ne!(script_sha1(BATCH_SCRIPT), script_sha1(STRIKE_SCRIPT));
}

#[test]
fn a_coalesced_call_admits_up_to_k_and_reports_the_rest() {
    // 3 of 10 admitted, 2 refused with a strike (the second opened the
    // breaker), the other 5 blocked.
    let c = coalesced_from_reply(&[3, 0, 500, 500, 7, 5, 0, 0, 1, 2], PER_MINUTE_60, 10).unwrap();
    assert_eq!((c.admitted, c.struck), (3, 2));
    assert!(c.verdict.allowed);
    assert_eq!((c.verdict.retry_after_ms, c.verdict.over), (500, 7));
    assert_eq!(c.breaker.tripped, Some(Tripped::Opened));
    assert_eq!(
        coalesced_from_reply(&[11, 0, 0, 0, 0, 0, 0, 0, 0, 0], PER_MINUTE_60, 10),
        Err(ReplyError::OutOfRange { index: 0 })
    );
    assert_eq!(
        coalesced_from_reply(&[3, 0, 0, 0, 0, 0, 0, 0, 0, 8], PER_MINUTE_60, 10),
        Err(ReplyError::OutOfRange { index: 9 })
    );
}

#[test]
fn the_window_script_admits_up_to_k_members_and_strikes_until_the_threshold() {
    assert!(SLIDING_WINDOW_SCRIPT.contains("local k = tonumber(ARGV[9] or '1')"));
    assert!(SLIDING_WINDOW_SCRIPT.contains("local admit = math.min(k, limit - count)"));
    assert!(SLIDING_WINDOW_SCRIPT.contains("entries[2 * i] = ARGV[3] .. '.' .. i"));
    assert!(SLIDING_WINDOW_SCRIPT.contains("struck = math.min(refused, threshold - strikes)"));
    assert!(!APPROX_SCRIPT.contains("ARGV[9]"));
}

#[test]
fn each_request_of_a_coalesced_call_gets_what_one_call_each_would_have_answered() {
    use crate::limiter::breaker::StrikeRule;
    let rules = BreakerRules {
        strikes: Some(StrikeRule {
            threshold: 5,
            ttl_ms: 60_000,
        }),
        ban: None,
    };
    // 10 requests: 3 admitted (2 slots left after them), 2 struck (3 -> 5
    // strikes, the last opens the breaker), 5 blocked.
    let c = coalesced_from_reply(&[3, 2, 900, 800, 7, 5, 0, 0, 1, 2], PER_MINUTE_60, 10).unwrap();
    let n = |i| c.nth(i, 10, rules);
    assert_eq!(
        [0, 1, 2].map(|i| (n(i).verdict.allowed, n(i).verdict.remaining)),
        [(true, 4), (true, 3), (true, 2)]
    );
    assert_eq!(n(0).breaker.strikes, 3);
    let (a, b) = (n(3), n(4));
    assert!(!a.verdict.allowed && a.struck && b.struck);
    assert_eq!((a.breaker.strikes, b.breaker.strikes), (4, 5));
    assert_eq!(
        (a.breaker.tripped, b.breaker.tripped),
        (None, Some(Tripped::Opened))
    );
    // 7 refusals in the window after the call: the 7 refused, one by one.
    assert_eq!((a.verdict.over, b.verdict.over), (1, 2));
    assert_eq!(
        (a.verdict.retry_after_ms, a.verdict.reset_after_ms),
        (800, 900)
    );
    for i in 5..10 {
        assert_eq!(n(i).breaker.block, Block::Blocked);
        assert!(!n(i).struck);
    }
    // Strikes off: every refused request is a refusal, none blocked.
    let off = coalesced_from_reply(&[0, 0, 900, 800, 4, 0, 0, 0, 0, 0], PER_MINUTE_60, 4).unwrap();
    for i in 0..4 {
        let got = off.nth(i, 4, BreakerRules::default());
        assert_eq!(
            (got.verdict.allowed, got.struck, got.breaker.block),
            (false, false, Block::Clear)
        );
        assert_eq!(got.verdict.over, i + 1);
    }
}

#[test]
fn a_batch_call_for_several_clients_replies_five_integers_each() {
    let two = batches_from_reply(&[3, 0, 0, 0, 0, 9, 5, 1, 60_000, 1], 2).unwrap();
    assert_eq!(two.len(), 2);
    assert_eq!(two[0].0, 3);
    assert_eq!((two[1].0, two[1].1.block), (9, Block::Blocked));
    assert!(batches_from_reply(&[3, 0, 0, 0, 0], 2).is_err());
    assert_eq!(batch_text(b"3 0 0 0 0"), Some(vec![3, 0, 0, 0, 0]));
    assert_eq!(batch_text(b"3 x"), None);
    assert_eq!(batch_text(b""), None);
    // 32 clients' worst-case reply fits a bulk string the node accepts.
    let worst = vec![u64::MAX.to_string(); 5 * BATCH_CLIENTS].join(" ");
    assert!(worst.len() <= crate::redis::command::MAX_BULK);
    assert!(BATCH_SCRIPT.contains("for i = 0, #KEYS / 6 - 1 do"));
    assert!(SPEND_SCRIPT.contains("redis.call('INCR', KEYS[6])"));
}

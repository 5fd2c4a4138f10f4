//! The replies' decoding: every integer bounded, the store's answer made
//! of it.

use crate::cluster::scripts::replies::*;
use crate::limiter::breaker::{Block, BreakerRules, BreakerStatus, Tripped};
use crate::limiter::{RateLimit, Verdict};
use crate::store::Spent;

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
fn a_coalesced_reply_leaving_more_than_the_limit_minus_what_it_admitted_is_refused() {
    // The fuzz seed fuzz/seeds/script_replies/regression-coalesced-admitted-over-limit:
    // 11 admitted under a limit of 60 can leave at most 49.
    let at = |remaining| {
        coalesced_from_reply(&[11, remaining, 0, 0, 0, 0, 0, 0, 0, 0], PER_MINUTE_60, 33)
    };
    assert!(at(49).is_ok());
    assert_eq!(at(50), Err(ReplyError::OutOfRange { index: 1 }));
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
    let c = coalesced_from_reply(&[3, 2, 900, 800, 2, 5, 0, 0, 1, 2], PER_MINUTE_60, 10).unwrap();
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
    // 2 refusals in the window after the call: the 2 struck, one by one
    // (the 5 blocked are not refusals).
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
}

#[test]
fn a_checks_reply_says_whether_the_script_struck() {
    let c = checked_from_reply(&[0, 0, 900, 900, 1, 1, 0, 0, 0, 1], PER_MINUTE_60, false).unwrap();
    assert!(c.struck && !c.verdict.allowed);
    assert_eq!((c.breaker.strikes, c.generation), (1, None));
    let c = checked_from_reply(&[0, 0, 900, 900, 1, 0, 0, 0, 0, 0], PER_MINUTE_60, false).unwrap();
    assert!(!c.struck, "strikes off, or no offence");
    for impossible in [
        [1, 5, 900, 0, 0, 0, 0, 0, 0, 1],
        [0, 0, 0, 0, 0, 5, 1, 900, 0, 1],
        [0, 0, 900, 900, 1, 1, 0, 0, 0, 2],
    ] {
        assert_eq!(
            checked_from_reply(&impossible, PER_MINUTE_60, false),
            Err(ReplyError::OutOfRange { index: 9 }),
            "struck while admitted or blocked, or twice for one request"
        );
    }
}

#[test]
fn a_redis_cluster_checks_reply_ends_with_the_slot_generation() {
    let c =
        checked_from_reply(&[0, 0, 900, 900, 1, 1, 0, 0, 0, 1, 42], PER_MINUTE_60, true).unwrap();
    assert_eq!((c.generation, c.struck), (Some(42), true));
    let c = checked_from_reply(
        &[1, 59, 60_000, 0, 0, 0, 0, 0, 0, 0, 0],
        PER_MINUTE_60,
        true,
    )
    .unwrap();
    assert_eq!(c.generation, None, "admitted: none");
    assert!(
        checked_from_reply(&[1, 59, 60_000, 0, 0, 0, 0, 0, 0, 0], PER_MINUTE_60, true).is_err()
    );
    assert_eq!(split_generation(&[], true), (&[][..], None));
}

fn two_limits() -> crate::limiter::Limits {
    let mut limits = crate::limiter::Limits::one(RateLimit {
        requests: 10,
        window_ms: 1_000,
    });
    limits
        .push(
            RateLimit {
                requests: 1000,
                window_ms: 3_600_000,
            },
            None,
        )
        .unwrap();
    limits
}

#[test]
fn the_stacked_reply_names_the_limit_that_decided() {
    let (v, _) =
        stacked_verdict_from_reply(&[0, 0, 900, 900, 1, 1, 0, 0, 0, 0], &two_limits()).unwrap();
    assert_eq!((v.allowed, v.retry_after_ms, v.limit), (false, 900, 0));
    let (v, _) =
        stacked_verdict_from_reply(&[1, 990, 3_600_000, 0, 0, 0, 0, 0, 0, 1], &two_limits())
            .unwrap();
    assert_eq!((v.allowed, v.remaining, v.limit), (true, 990, 1));
}

#[test]
fn a_stacked_reply_naming_no_limit_of_the_location_or_too_short_is_refused() {
    let limits = two_limits();
    assert_eq!(
        stacked_verdict_from_reply(&[1, 5, 0, 0, 0, 0, 0, 0, 0, 2], &limits),
        Err(ReplyError::OutOfRange { index: 9 })
    );
    assert!(stacked_verdict_from_reply(&[1, 5, 0, 0, 0, 0, 0, 0, 0], &limits).is_err());
    assert_eq!(
        stacked_verdict_from_reply(&[1, 11, 0, 0, 0, 0, 0, 0, 0, 0], &limits),
        Err(ReplyError::OutOfRange { index: 1 }),
        "more remaining than the limit it names"
    );
}

#[test]
fn a_stacked_refusal_of_an_offence_struck_when_strikes_are_on_and_the_client_is_clear() {
    use crate::limiter::breaker::StrikeRule;
    use crate::store::Offence;
    let on = BreakerRules {
        strikes: Some(StrikeRule {
            threshold: 5,
            ttl_ms: 60_000,
        }),
        ban: None,
    };
    let refused = [0, 0, 900, 900, 1, 1, 0, 0, 0, 0];
    let struck = |reply: &[i64], offence, rules| {
        stacked_checked_from_reply(reply, &two_limits(), offence, rules, false)
            .unwrap()
            .struck
    };
    assert!(struck(&refused, Offence::Unpaid, on));
    assert!(struck(&refused, Offence::Failed, on));
    assert!(!struck(&refused, Offence::None, on));
    assert!(!struck(&refused, Offence::Unpaid, BreakerRules::default()));
    assert!(
        !struck(&[0, 0, 0, 0, 0, 5, 1, 900, 0, 0], Offence::Unpaid, on),
        "blocked"
    );
    assert!(
        !struck(&[1, 9, 900, 0, 0, 0, 0, 0, 0, 0], Offence::Unpaid, on),
        "admitted"
    );
    let c = stacked_checked_from_reply(
        &[1, 9, 900, 0, 0, 0, 0, 0, 0, 0, 7],
        &two_limits(),
        Offence::Unpaid,
        on,
        true,
    )
    .unwrap();
    assert_eq!(c.generation, Some(7));
}

#[test]
fn a_strike_is_struck_unless_the_client_is_blocked_or_strikes_are_off() {
    use crate::limiter::breaker::StrikeRule;
    let on = BreakerRules {
        strikes: Some(StrikeRule {
            threshold: 5,
            ttl_ms: 60_000,
        }),
        ban: None,
    };
    assert!(struck_from_reply(&[3, 0, 0, 0], on).unwrap().struck);
    assert!(!struck_from_reply(&[5, 1, 900, 0], on).unwrap().struck);
    assert!(
        !struck_from_reply(&[0, 0, 0, 0], BreakerRules::default())
            .unwrap()
            .struck
    );
}

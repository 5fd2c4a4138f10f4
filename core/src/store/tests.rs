//! The table stores' order of steps, against the in-memory store.

use super::memory::Whose;
use super::*;
use crate::limiter::breaker::StrikeRule;

/// Limits keyed by their own values beside the client's.
mod keyed;
/// What an admitted request reports of its limit's refusals (the next
/// challenge's price).
mod overage;
/// A strike comes back once per refusal: by waiting or by paying.
mod taken_back_once;

const KEY: &[u8] = b"client";

const FIVE_PER_MINUTE: BreakerRules = BreakerRules {
    strikes: Some(StrikeRule {
        threshold: 5,
        ttl_ms: 60_000,
    }),
    ban: None,
};

/// Kept for the test's length (a subject borrows its limits).
fn kept<'a, T: 'a>(value: T) -> &'a T {
    Box::leak(Box::new(value))
}

fn subject(rules: BreakerRules) -> Subject<'static> {
    Subject {
        key: KEY,
        limits: kept(Limits::one(RateLimit {
            requests: 1,
            window_ms: 3_600_000,
        })),
        key_values: crate::store::CLIENT_KEYS,
        rules,
        rising: false,
    }
}

fn checked(reply: Reply) -> Checked {
    match reply {
        Reply::Checked(c) => c,
        other => panic!("expected Checked, got {other:?}"),
    }
}

const OFFENCE: Op = Op::Check {
    offence: Offence::Unpaid,
};
const PAID: Op = Op::Check {
    offence: Offence::None,
};
const FAILED: Op = Op::Check {
    offence: Offence::Failed,
};

fn solution(n: u8) -> Op {
    spend(n, true)
}

/// The spend of solution `n`, whose 429 counted a strike if `forgive`.
fn spend(n: u8, forgive: bool) -> Op {
    Op::Spend(Solution {
        digest: [n; 32],
        spent_until_ms: 60_000,
        generation: None,
        forgive,
        retry_at_ms: None,
    })
}

#[test]
fn strikes_are_recorded_only_for_refused_offences_of_unblocked_clients() {
    let mut s = MemoryStore::default();
    let on = subject(FIVE_PER_MINUTE);
    assert!(!checked(s.ask(OFFENCE, &on)).struck, "allowed");
    assert!(checked(s.ask(OFFENCE, &on)).struck, "a refused offence");
    assert!(!checked(s.ask(PAID, &on)).struck, "a valid solution");
    let off = subject(BreakerRules::default());
    assert!(!checked(s.ask(OFFENCE, &off)).struck, "strikes off");
    for _ in 0..4 {
        s.ask(OFFENCE, &on);
    }
    assert!(!checked(s.ask(OFFENCE, &on)).struck, "blocked");
    assert_eq!(s.strikes(KEY), 5);
}

#[test]
fn a_blocked_client_is_answered_from_its_breaker_without_counting() {
    let mut s = MemoryStore::default();
    let on = subject(FIVE_PER_MINUTE);
    for _ in 0..6 {
        s.ask(OFFENCE, &on);
    }
    let buckets = s.buckets.clone();
    let c = checked(s.ask(OFFENCE, &on));
    assert_eq!(c.breaker.block, Block::Blocked);
    assert_eq!(s.buckets, buckets, "no bucket write while blocked");
}

#[test]
fn a_spend_takes_back_one_strike_and_a_replay_nothing() {
    let mut s = MemoryStore::default();
    let on = subject(FIVE_PER_MINUTE);
    s.ask(OFFENCE, &on);
    s.ask(OFFENCE, &on);
    s.ask(OFFENCE, &on);
    assert_eq!(s.strikes(KEY), 2);
    assert!(
        matches!(s.ask(solution(1), &on), Reply::Spent(Spent::Accepted(st)) if st.strikes == 1)
    );
    assert_eq!(s.ask(solution(1), &on), Reply::Spent(Spent::Replayed));
    assert_eq!(s.strikes(KEY), 1);
}

#[test]
fn a_spend_takes_back_no_failed_verifications_strike() {
    let mut s = MemoryStore::default();
    let on = subject(FIVE_PER_MINUTE);
    s.ask(PAID, &on);
    s.ask(FAILED, &on);
    s.ask(FAILED, &on);
    assert_eq!(s.strikes(KEY), 2);
    assert!(
        matches!(s.ask(solution(1), &on), Reply::Spent(Spent::Accepted(st)) if st.strikes == 2)
    );
    s.ask(OFFENCE, &on);
    assert!(
        matches!(s.ask(solution(2), &on), Reply::Spent(Spent::Accepted(st)) if st.strikes == 2)
    );
}

#[test]
fn a_blocked_client_spends_nothing_and_takes_nothing_back() {
    let mut s = MemoryStore::default();
    let on = subject(FIVE_PER_MINUTE);
    for _ in 0..6 {
        s.ask(OFFENCE, &on);
    }
    assert!(matches!(
        s.ask(solution(1), &on),
        Reply::Spent(Spent::Blocked(_))
    ));
    assert!(s.spent.is_empty());
    assert_eq!(s.strikes(KEY), 5);
}

#[test]
fn a_store_without_room_for_a_spent_record_asks_for_a_fresh_payment() {
    let mut s = MemoryStore {
        full: true,
        ..MemoryStore::default()
    };
    let on = subject(FIVE_PER_MINUTE);
    // Not recorded, no offence: the fresh challenge pays back the strike
    // its 429 counted, if it counted one.
    let not_recorded = |pays_back| Reply::Spent(Spent::NotRecorded { pays_back });
    assert_eq!(s.ask(solution(1), &on), not_recorded(true));
    assert_eq!(s.ask(spend(2, false), &on), not_recorded(false));
}

#[test]
fn a_strike_reports_whether_it_was_recorded() {
    let mut s = MemoryStore::default();
    let on = subject(FIVE_PER_MINUTE);
    for n in 1..=5 {
        match s.ask(Op::Strike, &on) {
            Reply::Struck(st) => assert!(st.struck && st.breaker.strikes == n),
            other => panic!("{other:?}"),
        }
    }
    match s.ask(Op::Strike, &on) {
        Reply::Struck(st) => assert!(!st.struck && st.breaker.block == Block::Blocked),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_full_store_asks_to_retry_when_its_oldest_record_expires_within_1_to_60_s() {
    assert_eq!(full_retry_after_ms(None, 0), 1_000);
    assert_eq!(full_retry_after_ms(Some(500), 0), 1_000);
    assert_eq!(full_retry_after_ms(Some(30_000), 10_000), 20_000);
    assert_eq!(full_retry_after_ms(Some(u64::MAX), 0), 60_000);
    assert_eq!(full_retry_after_ms(Some(5), 10), 1_000, "already expired");
}

#[test]
fn room_is_made_from_cached_refusals_then_expired_spent_records_before_any_bucket_or_breaker() {
    assert_eq!(
        MAKE_ROOM,
        [
            MakeRoom::Nothing,
            MakeRoom::OldestRefusals,
            MakeRoom::ExpiredSpent,
            MakeRoom::OldestBuckets,
            MakeRoom::OldestBreakers
        ]
    );
}

/// 3 a minute named "burst", 5 an hour named "hourly".
fn stacked(rules: BreakerRules) -> Subject<'static> {
    let mut limits = Limits::NONE;
    for (requests, window_ms, name) in [(3, 60_000, "burst"), (5, 3_600_000, "hourly")] {
        let limit = RateLimit {
            requests,
            window_ms,
        };
        limits
            .push(limit, crate::limiter::LimitName::new(name).ok())
            .unwrap();
    }
    Subject {
        limits: kept(limits),
        key_values: crate::store::CLIENT_KEYS,
        ..subject(rules)
    }
}

#[test]
fn stacked_limits_admit_while_each_has_room_and_report_the_tightest() {
    let mut s = MemoryStore::default();
    let both = stacked(BreakerRules::default());
    let v = checked(s.ask(OFFENCE, &both)).verdict;
    assert_eq!(
        (v.allowed, v.remaining, v.limit),
        (true, 2, 0),
        "burst: 2 left"
    );
    s.ask(OFFENCE, &both);
    s.ask(OFFENCE, &both);
    let refused = checked(s.ask(OFFENCE, &both)).verdict;
    assert_eq!(
        (refused.allowed, refused.limit),
        (false, 0),
        "burst refuses"
    );
    assert_eq!(
        refused.retry_after_ms, 60_000,
        "burst's Retry-After: its 3 leave a minute after they came"
    );
    // after a minute burst has room again; the hour has 2 left of 5
    let v = checked(s.at(60_000).ask(OFFENCE, &both)).verdict;
    assert_eq!(
        (v.allowed, v.remaining, v.limit),
        (true, 1, 1),
        "hourly is the tightest now"
    );
    s.ask(OFFENCE, &both);
    let refused = checked(s.ask(OFFENCE, &both)).verdict;
    assert_eq!(
        (refused.allowed, refused.limit),
        (false, 1),
        "hourly refuses"
    );
    assert_eq!(
        refused.retry_after_ms, 3_600_000,
        "hourly's Retry-After: all 5 share the 4-minute slot of minute 0, which leaves \
         with its last (the exact log: 3_540_000, within one slot)"
    );
}

#[test]
fn a_request_refused_by_one_stacked_limit_counts_against_none() {
    let mut s = MemoryStore::default();
    let both = stacked(BreakerRules::default());
    for _ in 0..3 {
        s.ask(OFFENCE, &both);
    }
    for _ in 0..10 {
        assert!(!checked(s.ask(OFFENCE, &both)).verdict.allowed);
    }
    // an hour-only view of the same client: 3 counted, not 13
    let hourly = Subject {
        limits: kept(Limits::one(RateLimit {
            requests: 5,
            window_ms: 3_600_000,
        })),
        ..subject(BreakerRules::default())
    };
    let v = checked(s.ask(OFFENCE, &hourly)).verdict;
    assert_eq!(
        (v.allowed, v.remaining),
        (true, 1),
        "the refused requests were not counted"
    );
}

#[test]
fn a_green_request_under_stacked_limits_looks_each_bucket_up_once() {
    let mut s = MemoryStore::default();
    let both = stacked(BreakerRules::default());
    assert!(checked(s.ask(OFFENCE, &both)).verdict.allowed);
    assert_eq!(
        s.bucket_lookups, 2,
        "one lookup a limit: checked and counted"
    );
}

#[test]
fn a_request_a_later_stacked_limit_refuses_is_taken_back_from_the_earlier_ones() {
    let mut s = MemoryStore::default();
    let both = stacked(BreakerRules::default());
    // 3 a minute in minute 0 and 2 in minute 1: the hour's 5 are used up
    // while the minute's bucket has room.
    for at in [0, 0, 0, 60_000, 60_000] {
        assert!(checked(s.at(at).ask(OFFENCE, &both)).verdict.allowed);
    }
    let burst = |s: &MemoryStore| {
        s.buckets
            .get(&(KEY.to_vec(), Whose::Client, 3, 60_000))
            .copied()
    };
    let was = burst(&s);
    let lookups = s.bucket_lookups;
    let refused = checked(s.at(60_001).ask(OFFENCE, &both)).verdict;
    assert_eq!(
        (refused.allowed, refused.limit),
        (false, 1),
        "hourly refuses"
    );
    assert_eq!(
        burst(&s),
        was,
        "the minute's bucket as it was: nothing counted"
    );
    assert_eq!(
        s.bucket_lookups - lookups,
        3,
        "the earlier bucket looked up again"
    );
    // The minute still has its one request left.
    let minute = Subject {
        limits: kept(Limits::one(RateLimit {
            requests: 3,
            window_ms: 60_000,
        })),
        ..subject(BreakerRules::default())
    };
    assert_eq!(checked(s.ask(OFFENCE, &minute)).verdict.remaining, 0);
}

#[test]
fn a_refusal_by_a_stacked_limit_strikes_once() {
    let mut s = MemoryStore::default();
    let both = stacked(FIVE_PER_MINUTE);
    for _ in 0..3 {
        s.ask(OFFENCE, &both);
    }
    assert!(checked(s.ask(OFFENCE, &both)).struck);
    assert_eq!(s.strikes(KEY), 1);
}

#[test]
fn paying_a_challenge_that_counted_no_strike_takes_back_none_earned_elsewhere() {
    let mut s = MemoryStore::default();
    let on = subject(FIVE_PER_MINUTE);
    s.ask(OFFENCE, &on);
    s.ask(OFFENCE, &on);
    s.ask(OFFENCE, &on);
    assert_eq!(s.strikes(KEY), 2);
    assert!(matches!(
        s.ask(spend(1, false), &on),
        Reply::Spent(Spent::Accepted(st)) if st.strikes == 2
    ));
    assert_eq!(s.strikes(KEY), 2, "a strikes-off location's token");
}

/// One request a second (1 per 1 s), five strikes a minute.
fn per_second() -> Subject<'static> {
    Subject {
        limits: kept(Limits::one(RateLimit {
            requests: 1,
            window_ms: 1_000,
        })),
        ..subject(FIVE_PER_MINUTE)
    }
}

#[test]
fn a_client_that_waits_out_every_retry_after_is_never_blocked() {
    let mut s = MemoryStore::default();
    let on = per_second();
    let mut statuses = Vec::new();
    for round in 0..10u64 {
        let t = round * 1_000;
        for at in [t, t + 10] {
            let c = checked(s.at(at).ask(OFFENCE, &on));
            statuses.push(match (c.breaker.block, c.verdict.allowed) {
                (Block::Clear, true) => 200,
                (Block::Clear, false) => 429,
                _ => 403,
            });
        }
    }
    assert_eq!(statuses, [200, 429].repeat(10));
    assert_eq!(s.strikes(KEY), 1, "only the last 429 is not waited out yet");
}

#[test]
fn waiting_takes_back_one_strike_per_refusal_and_never_a_failed_one() {
    let mut s = MemoryStore::default();
    let on = per_second();
    s.at(0).ask(OFFENCE, &on);
    s.at(10).ask(FAILED, &on);
    s.at(20).ask(OFFENCE, &on);
    assert_eq!(s.strikes(KEY), 2);
    assert!(checked(s.at(1_100).ask(OFFENCE, &on)).verdict.allowed);
    assert_eq!(s.strikes(KEY), 1, "the 429's strike, not the failure's");
    assert!(checked(s.at(2_200).ask(OFFENCE, &on)).verdict.allowed);
    assert_eq!(s.strikes(KEY), 1, "no refusal left to take back");
}

#[test]
fn a_wait_under_another_limit_takes_back_nothing() {
    let mut s = MemoryStore::default();
    let dear = subject(FIVE_PER_MINUTE);
    let cheap = per_second();
    s.at(0).ask(OFFENCE, &dear);
    s.at(1).ask(OFFENCE, &dear);
    assert_eq!(s.strikes(KEY), 1);
    for t in 0..5u64 {
        assert!(
            checked(s.at(10 + 1_000 * t).ask(OFFENCE, &cheap))
                .verdict
                .allowed
        );
    }
    assert_eq!(s.strikes(KEY), 1);
}

/// A store of room for 32 entries: 16 spent records, 2 per key.
fn small_store() -> MemoryStore {
    MemoryStore {
        spent_room: Some(SpentRoom::of_store(32, 60_000)),
        ..MemoryStore::default()
    }
}

fn record_at(s: &mut MemoryStore, owner: &[u8], n: u8, at_ms: u64) -> Recorded {
    s.at(at_ms);
    let now = s.now;
    record(s, owner, &[n; 32], at_ms + 60_000, 60_000, now)
}

#[test]
fn one_key_records_no_more_than_its_share_and_others_keep_theirs() {
    let mut s = small_store();
    assert_eq!(s.spent_room().per_key, 2);
    assert_eq!(record_at(&mut s, b"a", 1, 1_000), Recorded::New);
    assert_eq!(record_at(&mut s, b"a", 2, 1_000), Recorded::New);
    assert_eq!(record_at(&mut s, b"a", 3, 1_000), Recorded::NoRoom);
    assert_eq!(record_at(&mut s, b"b", 4, 1_000), Recorded::New);
    assert!(
        !s.spent.contains_key(&[3; 32]),
        "not recorded: not accepted"
    );
}

#[test]
fn a_replay_is_found_before_the_share_is_counted() {
    let mut s = small_store();
    assert_eq!(record_at(&mut s, b"a", 1, 1_000), Recorded::New);
    // replaying someone's record (a bot's nonce, say) uses up nothing
    for _ in 0..5 {
        assert_eq!(record_at(&mut s, b"a", 1, 1_000), Recorded::Held);
    }
    assert_eq!(record_at(&mut s, b"a", 2, 1_000), Recorded::New);
    // and a replay is a replay even once the share is used up
    assert_eq!(record_at(&mut s, b"a", 1, 1_000), Recorded::Held);
}

#[test]
fn a_keys_share_comes_back_as_its_records_expire() {
    let mut s = small_store();
    record_at(&mut s, b"a", 1, 1_000);
    record_at(&mut s, b"a", 2, 1_000);
    assert_eq!(record_at(&mut s, b"a", 3, 1_000), Recorded::NoRoom);
    // 60 s records, counted over the 60 s they can live
    assert_eq!(record_at(&mut s, b"a", 3, 61_000), Recorded::New);
}

#[test]
fn a_record_the_store_had_no_room_for_uses_up_no_share() {
    let mut s = small_store();
    s.full = true;
    for n in 1..=3 {
        assert_eq!(record_at(&mut s, b"a", n, 1_000), Recorded::NoRoom);
    }
    s.full = false;
    assert_eq!(record_at(&mut s, b"a", 4, 1_000), Recorded::New);
    assert_eq!(record_at(&mut s, b"a", 5, 1_000), Recorded::New);
    assert_eq!(record_at(&mut s, b"a", 6, 1_000), Recorded::NoRoom);
}

#[test]
fn records_of_many_lifetimes_share_one_keys_share() {
    // A key cannot widen its share by spending at other lifetimes.
    let mut s = small_store();
    let mut recorded = Vec::new();
    for (n, lifetime) in [(1, 1_000), (2, 5_000), (3, 20_000), (4, 59_000)] {
        s.at(1_000);
        let now = s.now;
        recorded.push(record(
            &mut s,
            b"a",
            &[n; 32],
            1_000 + lifetime,
            60_000,
            now,
        ));
    }
    let new = recorded.iter().filter(|r| **r == Recorded::New).count();
    assert_eq!(new, 2, "{recorded:?}");
}

#[test]
fn spent_records_never_take_more_than_the_stores_share() {
    let mut s = small_store();
    let recorded: Vec<Recorded> = (0..20).map(|n| record_at(&mut s, &[n], n, 1_000)).collect();
    let new = recorded.iter().filter(|r| **r == Recorded::New).count();
    assert_eq!(new, 16, "{recorded:?}");
    // they expire, and the store takes records again
    assert_eq!(record_at(&mut s, b"late", 30, 62_000), Recorded::New);
}

#[test]
fn a_payer_whose_record_finds_no_room_is_asked_to_pay_again_not_refused() {
    let mut s = small_store();
    let on = subject(FIVE_PER_MINUTE);
    s.ask(PAID, &on);
    for _ in 0..3 {
        s.ask(OFFENCE, &on);
    }
    for n in 1..=2 {
        assert!(matches!(
            s.ask(solution(n), &on),
            Reply::Spent(Spent::Accepted(_))
        ));
    }
    let not_recorded = Reply::Spent(Spent::NotRecorded { pays_back: true });
    assert_eq!(s.ask(solution(3), &on), not_recorded);
    assert_eq!(s.spent.len(), 2);
    assert_eq!(
        s.strikes(KEY),
        1,
        "no strike for it, none taken back either"
    );
}

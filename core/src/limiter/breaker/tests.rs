use super::*;

const FIVE_PER_MINUTE: BreakerRules = BreakerRules {
    strikes: Some(StrikeRule {
        threshold: 5,
        ttl_ms: 60_000,
    }),
    ban: None,
};

fn with_ban(after: u32, ttl_ms: u64) -> BreakerRules {
    BreakerRules {
        ban: Some(BanRule { after, ttl_ms }),
        ..FIVE_PER_MINUTE
    }
}

/// Offences at `now`, returning each one's block.
fn offend(state: &mut StrikeCounter, rules: BreakerRules, now: u64, n: usize) -> Vec<Block> {
    (0..n).map(|_| state.strike(rules, now).block).collect()
}

#[test]
fn the_sixth_offence_is_the_first_blocked_with_five_strikes() {
    let mut s = StrikeCounter::default();
    let blocks = offend(&mut s, FIVE_PER_MINUTE, 1_000, 7);
    use Block::*;
    assert_eq!(
        blocks,
        [Clear, Clear, Clear, Clear, Clear, Blocked, Blocked]
    );
}

#[test]
fn blocked_requests_add_no_strikes_and_do_not_extend_the_block() {
    let mut s = StrikeCounter::default();
    offend(&mut s, FIVE_PER_MINUTE, 1_000, 5);
    offend(&mut s, FIVE_PER_MINUTE, 30_000, 10);
    assert_eq!(s.strikes, 5);
    assert_eq!(s.strikes_until_ms, 61_000);
    assert_eq!(s.block(FIVE_PER_MINUTE, 60_999), Block::Blocked);
    assert_eq!(s.block(FIVE_PER_MINUTE, 61_000), Block::Clear);
}

#[test]
fn every_strike_renews_the_ttl() {
    let mut s = StrikeCounter::default();
    for at in [0, 50_000, 100_000, 150_000] {
        assert_eq!(s.strike(FIVE_PER_MINUTE, at).block, Block::Clear);
    }
    // Four strikes 50 s apart: none was forgotten.
    assert_eq!(s.strikes, 4);
    assert_eq!(s.strike(FIVE_PER_MINUTE, 200_000).strikes, 5);
    assert_eq!(s.block(FIVE_PER_MINUTE, 200_001), Block::Blocked);
}

#[test]
fn strikes_are_forgotten_a_ttl_after_the_last() {
    let mut s = StrikeCounter::default();
    offend(&mut s, FIVE_PER_MINUTE, 0, 4);
    assert_eq!(s.strike(FIVE_PER_MINUTE, 60_000).strikes, 1);
}

#[test]
fn strikes_off_never_blocks_and_counts_nothing() {
    let mut s = StrikeCounter::default();
    let blocks = offend(&mut s, BreakerRules::default(), 0, 100);
    assert!(blocks.iter().all(|b| *b == Block::Clear));
    assert_eq!(s.strikes, 0);
}

#[test]
fn a_threshold_of_one_blocks_the_second_offence() {
    let rules = BreakerRules {
        strikes: Some(StrikeRule {
            threshold: 1,
            ttl_ms: 10_000,
        }),
        ban: None,
    };
    let mut s = StrikeCounter::default();
    assert_eq!(offend(&mut s, rules, 0, 2), [Block::Clear, Block::Blocked]);
}

#[test]
fn k_openings_within_the_ban_time_ban_the_client_for_that_time() {
    let rules = with_ban(2, 600_000);
    let mut s = StrikeCounter::default();
    // First opening at t=0; the block ends at 60 s.
    offend(&mut s, rules, 0, 5);
    assert_eq!(s.block(rules, 1), Block::Blocked);
    // Second opening at t=100 s: banned for 600 s from then.
    offend(&mut s, rules, 100_000, 5);
    assert_eq!(s.block(rules, 100_001), Block::Banned);
    assert_eq!(s.block(rules, 699_999), Block::Banned);
    assert_eq!(s.block(rules, 700_000), Block::Clear);
}

#[test]
fn openings_further_apart_than_the_ban_time_do_not_ban() {
    let rules = with_ban(2, 100_000);
    let mut s = StrikeCounter::default();
    offend(&mut s, rules, 0, 5);
    offend(&mut s, rules, 200_000, 5);
    assert_eq!(s.block(rules, 200_001), Block::Blocked);
    assert_eq!(s.trips, 1);
}

#[test]
fn a_ban_does_not_count_strikes() {
    let rules = with_ban(1, 100_000);
    let mut s = StrikeCounter::default();
    offend(&mut s, rules, 0, 5);
    let breaker = s.strike(rules, 70_000);
    assert_eq!(breaker.block, Block::Banned);
    assert_eq!(s.strikes, 0, "strikes expired at 60 s and none were added");
}

#[test]
fn the_standing_says_how_long_the_block_lasts() {
    let mut s = StrikeCounter::default();
    offend(&mut s, FIVE_PER_MINUTE, 1_000, 5);
    let breaker = s.status(FIVE_PER_MINUTE, 21_000);
    assert_eq!(breaker.block, Block::Blocked);
    assert_eq!(breaker.block_ms, 40_000);
    let banning = with_ban(1, 300_000);
    let mut b = StrikeCounter::default();
    offend(&mut b, banning, 0, 6);
    assert_eq!(b.status(banning, 100_000).block_ms, 200_000);
}

#[test]
fn a_remembered_block_holds_for_its_time_and_no_longer() {
    let mut s = StrikeCounter::default();
    let reported = BreakerStatus {
        strikes: 5,
        block: Block::Blocked,
        block_ms: 30_000,
        tripped: None,
    };
    s.remember(reported, FIVE_PER_MINUTE, 10_000);
    assert_eq!(s.block(FIVE_PER_MINUTE, 39_999), Block::Blocked);
    assert_eq!(s.block(FIVE_PER_MINUTE, 40_000), Block::Clear);
    let banning = with_ban(2, 600_000);
    let banned = BreakerStatus {
        block: Block::Banned,
        ..reported
    };
    s.remember(banned, banning, 50_000);
    assert_eq!(s.block(banning, 79_999), Block::Banned);
    assert_eq!(s.block(banning, 80_000), Block::Clear);
}

#[test]
fn remembering_a_clear_standing_changes_nothing() {
    let mut s = StrikeCounter::default();
    s.remember(BreakerStatus::default(), FIVE_PER_MINUTE, 1_000);
    assert_eq!(s, StrikeCounter::default());
}

#[test]
fn the_strike_that_opens_the_breaker_says_so_once() {
    let mut s = StrikeCounter::default();
    let tripped: Vec<Option<Tripped>> = (0..7)
        .map(|_| s.strike(FIVE_PER_MINUTE, 0).tripped)
        .collect();
    assert_eq!(tripped[4], Some(Tripped::Opened));
    assert_eq!(tripped.iter().filter(|t| t.is_some()).count(), 1);
}

#[test]
fn the_opening_that_bans_says_banned() {
    let rules = with_ban(2, 600_000);
    let mut s = StrikeCounter::default();
    let first: Vec<_> = (0..5).filter_map(|_| s.strike(rules, 0).tripped).collect();
    let second: Vec<_> = (0..5)
        .filter_map(|_| s.strike(rules, 100_000).tripped)
        .collect();
    assert_eq!(
        (first, second),
        (vec![Tripped::Opened], vec![Tripped::Banned])
    );
}

/// Challenges sent at `now`: unpaid strikes.
fn challenge(state: &mut StrikeCounter, rules: BreakerRules, now: u64, n: usize) {
    for _ in 0..n {
        state.strike_unpaid(rules, now);
    }
}

#[test]
fn a_paid_challenge_takes_back_one_strike_and_never_goes_below_zero() {
    let mut s = StrikeCounter::default();
    challenge(&mut s, FIVE_PER_MINUTE, 0, 2);
    s.forgive(FIVE_PER_MINUTE, 1);
    assert_eq!((s.strikes, s.unpaid), (1, 1));
    s.forgive(FIVE_PER_MINUTE, 2);
    s.forgive(FIVE_PER_MINUTE, 3);
    assert_eq!((s.strikes, s.unpaid), (0, 0), "no credit");
    // Five offences still open the breaker after paying twice.
    let blocks = offend(&mut s, FIVE_PER_MINUTE, 4, 6);
    assert_eq!(blocks[5], Block::Blocked);
}

#[test]
fn paying_takes_back_no_failed_verification_replay_or_trap_hit() {
    let mut s = StrikeCounter::default();
    offend(&mut s, FIVE_PER_MINUTE, 0, 3);
    challenge(&mut s, FIVE_PER_MINUTE, 0, 1);
    for at in 1..5 {
        s.forgive(FIVE_PER_MINUTE, at);
    }
    assert_eq!((s.strikes, s.unpaid), (3, 0), "only the 429's strike");
}

#[test]
fn unpaid_strikes_expire_with_the_others() {
    let mut s = StrikeCounter::default();
    challenge(&mut s, FIVE_PER_MINUTE, 0, 2);
    assert_eq!(s.block(FIVE_PER_MINUTE, 60_000), Block::Clear);
    assert_eq!((s.strikes, s.unpaid), (0, 0));
}

#[test]
fn paying_every_challenge_never_blocks() {
    let mut s = StrikeCounter::default();
    for at in 0..50 {
        assert_eq!(
            s.strike_unpaid(FIVE_PER_MINUTE, at * 1000).block,
            Block::Clear
        );
        s.forgive(FIVE_PER_MINUTE, at * 1000 + 500);
    }
    assert_eq!(s.strikes, 0);
}

#[test]
fn a_blocked_client_is_not_forgiven() {
    let mut s = StrikeCounter::default();
    offend(&mut s, FIVE_PER_MINUTE, 0, 5);
    s.forgive(FIVE_PER_MINUTE, 1);
    assert_eq!(s.strikes, 5);
    assert_eq!(s.block(FIVE_PER_MINUTE, 2), Block::Blocked);
}

#[test]
fn a_strike_with_a_shorter_time_never_shortens_a_block() {
    let long = BreakerRules {
        strikes: Some(StrikeRule {
            threshold: 5,
            ttl_ms: 600_000,
        }),
        ban: None,
    };
    let short = BreakerRules {
        strikes: Some(StrikeRule {
            threshold: 100,
            ttl_ms: 2_000,
        }),
        ban: None,
    };
    let mut s = StrikeCounter::default();
    offend(&mut s, long, 0, 5);
    // An offence at a location allowing 100 strikes for 2 s.
    s.strike(short, 1_000);
    assert_eq!(s.strikes_until_ms, 600_000);
    assert_eq!(s.block(long, 599_999), Block::Blocked);
}

#[test]
fn forgotten_at_covers_strikes_and_trips() {
    let rules = with_ban(3, 500_000);
    let mut s = StrikeCounter::default();
    offend(&mut s, rules, 0, 5);
    assert_eq!(s.forgotten_at_ms(), 500_000);
}

#[test]
fn a_block_the_zone_counted_alone_is_not_confirmed_one_redis_reported_is() {
    let mut zone = StrikeCounter::default();
    offend(&mut zone, FIVE_PER_MINUTE, 1_000, 5);
    assert_eq!(zone.status(FIVE_PER_MINUTE, 1_000).block, Block::Blocked);
    assert_eq!(zone.confirmed(FIVE_PER_MINUTE, 1_000).block, Block::Clear);
    let reported = BreakerStatus {
        strikes: 5,
        block: Block::Blocked,
        block_ms: 30_000,
        tripped: None,
    };
    zone.remember(reported, FIVE_PER_MINUTE, 2_000);
    let confirmed = zone.confirmed(FIVE_PER_MINUTE, 2_000);
    assert_eq!(
        (confirmed.block, confirmed.block_ms),
        (Block::Blocked, 59_000),
        "held with the block's own end (Retry-After: the later of the two)"
    );
    assert_eq!(
        zone.confirmed(FIVE_PER_MINUTE, 2_000 + CONFIRMED_MS).block,
        Block::Clear,
        "a second later Redis is asked again"
    );
}

#[test]
fn a_ban_acts_at_a_location_without_pow_shield_ban() {
    let banning = with_ban(1, 600_000);
    let mut s = StrikeCounter::default();
    offend(&mut s, banning, 0, 5);
    // Strikes expired at 60 s; the ban holds where only strikes are on.
    assert_eq!(s.block(FIVE_PER_MINUTE, 100_000), Block::Banned);
    assert_eq!(s.status(FIVE_PER_MINUTE, 100_000).block_ms, 500_000);
    assert_eq!(s.block(FIVE_PER_MINUTE, 600_000), Block::Clear);
    // Not where no breaker counts the key (strikes off, no ban).
    assert_eq!(s.block(BreakerRules::default(), 100_000), Block::Clear);
}

#[test]
fn a_ban_another_store_reported_holds_at_a_location_without_pow_shield_ban() {
    let mut s = StrikeCounter::default();
    let banned = BreakerStatus {
        strikes: 0,
        block: Block::Banned,
        block_ms: 30_000,
        tripped: None,
    };
    s.remember(banned, FIVE_PER_MINUTE, 1_000);
    assert_eq!(s.block(FIVE_PER_MINUTE, 30_999), Block::Banned);
    assert_eq!(s.block(FIVE_PER_MINUTE, 31_000), Block::Clear);
}

#[test]
fn the_strike_that_opens_the_breaker_says_how_long_the_block_really_lasts() {
    let long = BreakerRules {
        strikes: Some(StrikeRule {
            threshold: 100,
            ttl_ms: 60_000,
        }),
        ban: None,
    };
    let short = BreakerRules {
        strikes: Some(StrikeRule {
            threshold: 3,
            ttl_ms: 3_000,
        }),
        ban: None,
    };
    let mut s = StrikeCounter::default();
    // An earlier strike at a location that remembers strikes for 60 s.
    s.strike(long, 0);
    s.strike(short, 10_000);
    let opening = s.strike(short, 10_000);
    assert_eq!(opening.tripped, Some(Tripped::Opened));
    assert_eq!(opening.block, Block::Clear, "answered as an offence");
    assert_eq!(opening.block_ms, 50_000, "not the 3 s of this location");
    let banning = with_ban(1, 300_000);
    let mut b = StrikeCounter::default();
    let banned = offend_status(&mut b, banning, 0, 5);
    assert_eq!(banned.tripped, Some(Tripped::Banned));
    assert_eq!(banned.block_ms, 300_000);
}

/// `n` offences at `now`; the last one's status.
fn offend_status(s: &mut StrikeCounter, rules: BreakerRules, now: u64, n: usize) -> BreakerStatus {
    let mut last = BreakerStatus::default();
    for _ in 0..n {
        last = s.strike(rules, now);
    }
    last
}

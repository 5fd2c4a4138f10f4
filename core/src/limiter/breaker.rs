//! The circuit breaker (docs/directives.md, pow_shield_strikes) as plain data and rules: strikes per client,
//! the block they open, and the ban that repeated blocks earn. The
//! shared-memory store runs these functions under its lock; cluster mode's
//! scripts (`cluster::scripts`, their `breaker.lua` part) do the same steps
//! atomically in Redis, and the script-vs-model tables check they agree.
//!
//! Times are whatever clock the caller uses consistently (milliseconds).

/// How long a node answers a block Redis reported without asking Redis
/// again (a blocked flooder costs Redis one call a second per worker).
pub const CONFIRMED_MS: u64 = 1_000;

/// `pow_shield_strikes <n> <time>`: the `n`-th strike opens the breaker,
/// which stays open until `ttl_ms` after the last strike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StrikeRule {
    /// Strikes that open the breaker (at least 1).
    pub threshold: u32,
    /// How long strikes are remembered after the last one.
    pub ttl_ms: u64,
}

/// `pow_shield_ban <time> after=<k>`: `k` breaker openings within `ttl_ms`
/// ban the client for `ttl_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BanRule {
    /// Breaker openings that earn a ban (at least 1).
    pub after: u32,
    /// The window in which openings are counted, and the ban's length.
    pub ttl_ms: u64,
}

/// The red-zone rules of one location; `None` is `off`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BreakerRules {
    pub strikes: Option<StrikeRule>,
    pub ban: Option<BanRule>,
}

/// Whether a client may be served at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Block {
    /// Not blocked.
    #[default]
    Clear,
    /// The breaker is open (level 1).
    Blocked,
    /// Banned after repeated openings (level 2).
    Banned,
}

/// What a strike set off (logged once each, for fail2ban and operators).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tripped {
    /// The breaker opened: this was the last strike it takes.
    Opened,
    /// The breaker opened, and that opening earned a ban.
    Banned,
}

/// A client's red-zone state as a store reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BreakerStatus {
    /// Strikes counted now (after this request's, if it made one).
    pub strikes: u32,
    /// Whether this request is blocked. A request that makes the last
    /// strike is still answered as an offence; the next one is blocked.
    pub block: Block,
    /// How long the block lasts from now (0 when clear). Blocked requests
    /// never extend it, so a node may remember it that long.
    pub block_ms: u64,
    /// Set on the strike that opened the breaker (and maybe banned).
    pub tripped: Option<Tripped>,
}

/// One client's breaker, kept by the local store (fixed size, plain data,
/// so it lives in the shared-memory zone).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StrikeCounter {
    pub strikes: u32,
    /// Breaker openings counted towards a ban (`after=` is at most 1000).
    pub trips: u16,
    /// Of `strikes`, those of challenges not paid yet (429s answered
    /// without a solution): the only ones paying takes back. (16 bits keep
    /// a zone entry in one 128-byte slot; beyond, it saturates: a client
    /// with 65,535 unpaid challenges is not honest.)
    pub unpaid: u16,
    /// Strikes are forgotten at this time (last strike + ttl).
    pub strikes_until_ms: u64,
    /// Openings are forgotten at this time; while `trips` has reached the
    /// ban rule's `after`, the ban lasts until then.
    pub trips_until_ms: u64,
    /// Until when a block another store reported (Redis, in cluster mode)
    /// holds here ([`StrikeCounter::remember`]); a block the zone counted
    /// on its own (the fallback, while Redis was unavailable) is not one:
    /// once Redis is back, it decides ([`StrikeCounter::confirmed`]).
    pub confirmed_until_ms: u64,
}

impl StrikeCounter {
    /// Forgets what has expired by `now_ms`.
    fn expire(&mut self, now_ms: u64) {
        if now_ms >= self.strikes_until_ms {
            self.strikes = 0;
            self.unpaid = 0;
        }
        if now_ms >= self.trips_until_ms {
            self.trips = 0;
        }
    }

    /// Whether the client is blocked now. Reading never extends a block.
    pub fn block(&mut self, rules: BreakerRules, now_ms: u64) -> Block {
        self.expire(now_ms);
        if rules
            .ban
            .is_some_and(|ban| u32::from(self.trips) >= ban.after)
        {
            return Block::Banned;
        }
        if rules
            .strikes
            .is_some_and(|rule| self.strikes >= rule.threshold)
        {
            return Block::Blocked;
        }
        Block::Clear
    }

    /// Records one strike that is never taken back (a failed verification,
    /// a replay, a trap hit) unless the client is blocked (blocked requests
    /// add nothing), and returns the breaker this request is answered with.
    pub fn strike(&mut self, rules: BreakerRules, now_ms: u64) -> BreakerStatus {
        self.strike_as(rules, now_ms, false)
    }

    /// Records the strike of a challenge sent (a 429 without a solution):
    /// paying that challenge later takes it back ([`StrikeCounter::forgive`]).
    pub fn strike_unpaid(&mut self, rules: BreakerRules, now_ms: u64) -> BreakerStatus {
        self.strike_as(rules, now_ms, true)
    }

    fn strike_as(&mut self, rules: BreakerRules, now_ms: u64, unpaid: bool) -> BreakerStatus {
        let block = self.block(rules, now_ms);
        let Some(rule) = rules.strikes.filter(|_| block == Block::Clear) else {
            return self.status(rules, now_ms);
        };
        self.strikes = self.strikes.saturating_add(1);
        if unpaid {
            self.unpaid = self.unpaid.saturating_add(1);
        }
        // A strike never shortens a block: a location with a shorter time
        // keeps the later expiry another location set.
        self.strikes_until_ms = self
            .strikes_until_ms
            .max(now_ms.saturating_add(rule.ttl_ms));
        let tripped = (self.strikes == rule.threshold).then(|| match rules.ban {
            Some(ban) => self.trip(ban, now_ms),
            None => Tripped::Opened,
        });
        // This request is answered as an offence; the next one is blocked.
        BreakerStatus {
            strikes: self.strikes,
            block: Block::Clear,
            block_ms: 0,
            tripped,
        }
    }

    /// A paid challenge: the 429 that sent it was no offence, so its
    /// strike is taken back: one of the unpaid ones (never below 0: paying
    /// earns no credit, and takes back no failed verification, replay or
    /// trap hit). A blocked or banned client is not forgiven. The expiry
    /// stays.
    pub fn forgive(&mut self, rules: BreakerRules, now_ms: u64) {
        if self.block(rules, now_ms) == Block::Clear && self.unpaid > 0 {
            self.unpaid -= 1;
            self.strikes = self.strikes.saturating_sub(1);
        }
    }

    /// Unpaid strikes counted now (429s neither paid nor waited out).
    pub fn unpaid_now(&mut self, now_ms: u64) -> u16 {
        self.expire(now_ms);
        self.unpaid
    }

    /// The breaker just opened: one more trip towards a ban. The window
    /// starts at the first trip; the trip that bans restarts it as the ban.
    fn trip(&mut self, ban: BanRule, now_ms: u64) -> Tripped {
        if self.trips == 0 {
            self.trips_until_ms = now_ms.saturating_add(ban.ttl_ms);
        }
        self.trips = self.trips.saturating_add(1);
        if u32::from(self.trips) < ban.after {
            return Tripped::Opened;
        }
        self.trips_until_ms = now_ms.saturating_add(ban.ttl_ms);
        Tripped::Banned
    }

    /// The breaker now: strikes, block and how long the block lasts.
    pub fn status(&mut self, rules: BreakerRules, now_ms: u64) -> BreakerStatus {
        let block = self.block(rules, now_ms);
        let until = match block {
            Block::Clear => now_ms,
            Block::Blocked => self.strikes_until_ms,
            Block::Banned => self.trips_until_ms,
        };
        BreakerStatus {
            strikes: self.strikes,
            block,
            block_ms: until.saturating_sub(now_ms),
            tripped: None,
        }
    }

    /// Takes over a block another store reported (Redis, in cluster mode)
    /// for as long as it lasts, so that the client's next requests are
    /// answered here without asking that store again.
    pub fn remember(&mut self, breaker: BreakerStatus, rules: BreakerRules, now_ms: u64) {
        let until = now_ms.saturating_add(breaker.block_ms);
        if breaker.block != Block::Clear {
            // Held here for at most CONFIRMED_MS before Redis is asked again:
            // a payment written late (a node's spends after an outage) may
            // have taken back the strikes that opened it.
            self.confirmed_until_ms = until.min(now_ms.saturating_add(CONFIRMED_MS));
        }
        match (breaker.block, rules.strikes, rules.ban) {
            (Block::Blocked, Some(rule), _) => {
                self.strikes = self.strikes.max(rule.threshold);
                self.strikes_until_ms = self.strikes_until_ms.max(until);
            }
            (Block::Banned, _, Some(ban)) => {
                self.trips = self.trips.max(u16::try_from(ban.after).unwrap_or(u16::MAX));
                self.trips_until_ms = self.trips_until_ms.max(until);
            }
            _ => {}
        }
    }

    /// The block another store reported, while it holds: a block the
    /// zone's fallback counted on its own is no block here once that store
    /// answers again (it never confirmed it).
    pub fn confirmed(&mut self, rules: BreakerRules, now_ms: u64) -> BreakerStatus {
        let status = self.status(rules, now_ms);
        if status.block == Block::Clear || now_ms >= self.confirmed_until_ms {
            return BreakerStatus {
                block: Block::Clear,
                block_ms: 0,
                ..status
            };
        }
        // (The block's own end: the response's Retry-After.)
        status
    }

    /// When the entry carries nothing any more (for the zone's expiry).
    pub fn forgotten_at_ms(&self) -> u64 {
        self.strikes_until_ms.max(self.trips_until_ms)
    }
}

/// The block the strike that tripped the breaker opened, for the node to
/// keep (the next request is blocked, not refused once more): the strike
/// TTL, or the ban's when it banned.
pub fn opened_block(breaker: &BreakerStatus, rules: BreakerRules) -> Option<BreakerStatus> {
    let (block, block_ms) = match (breaker.tripped?, rules.ban) {
        (Tripped::Banned, Some(ban)) => (Block::Banned, ban.ttl_ms),
        _ => (Block::Blocked, rules.strikes?.ttl_ms),
    };
    Some(BreakerStatus {
        strikes: breaker.strikes,
        block,
        block_ms,
        tripped: None,
    })
}

#[cfg(test)]
mod tests {
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
}

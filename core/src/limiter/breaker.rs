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

/// The trips a ban leaves (more than any `after=`, at most 1000): a ban
/// acts at every location whose breaker counts the key, also at those
/// without `pow_shield_ban` (SPEC §5). Redis's trips key holds the same.
pub const BANNED_TRIPS: u16 = u16::MAX;

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
    /// never extend it, so a node may remember it that long. On the strike
    /// that trips the breaker (still answered as an offence), how long the
    /// block it opens lasts: the longest of the strikes' times (an earlier
    /// strike elsewhere may have set a later end) and of a ban.
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
        // A ban holds wherever a breaker counts the key.
        let breaker_on = rules.strikes.is_some() || rules.ban.is_some();
        if (breaker_on && self.trips == BANNED_TRIPS)
            || rules
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
        // This request is answered as an offence; the next one is blocked,
        // until the later of the strikes' end and the ban's.
        let block_ms = match tripped {
            None => 0,
            Some(Tripped::Opened) => self.strikes_until_ms.saturating_sub(now_ms),
            Some(Tripped::Banned) => self
                .strikes_until_ms
                .max(self.trips_until_ms)
                .saturating_sub(now_ms),
        };
        BreakerStatus {
            strikes: self.strikes,
            block: Block::Clear,
            block_ms,
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
        self.trips = BANNED_TRIPS;
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
            (Block::Banned, _, _) => {
                self.trips = BANNED_TRIPS;
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
/// keep (the next request is blocked, not refused once more): as long as
/// the store says (`block_ms`), else the strike TTL, or the ban's when it
/// banned.
pub fn opened_block(breaker: &BreakerStatus, rules: BreakerRules) -> Option<BreakerStatus> {
    let (block, block_ms) = match (breaker.tripped?, rules.ban) {
        (Tripped::Banned, Some(ban)) => (Block::Banned, ban.ttl_ms),
        _ => (Block::Blocked, rules.strikes?.ttl_ms),
    };
    let block_ms = match breaker.block_ms {
        0 => block_ms,
        ms => ms,
    };
    Some(BreakerStatus {
        strikes: breaker.strikes,
        block,
        block_ms,
        tripped: None,
    })
}

#[cfg(test)]
mod tests;

//! Rising difficulty (`pow_shield_difficulty <n>[b] max=<m>[b]`): the price
//! of a request grows with the client's abuse. Prices are leading zero bits;
//! a difficulty written in hex digits rises a hex digit (×16) per step, one
//! written in bits a bit (×2).

use crate::limiter::{KeyId, Limits, MAX_LIMITS};
use crate::protocol::{Work, MAX_BITS, MIN_BITS};
use crate::syntax::Difficulty;

/// The word an Equi-X location's price policy ends with ("equix" in ASCII).
const EQUIX_WORD: u64 = 0x65_7175_6978;

/// `pow_shield_difficulty <base> [max=<max>]`, in leading zero bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DifficultyRule {
    /// Bits asked of a client in good standing.
    pub base: u8,
    /// Equal to `base` when difficulty does not rise.
    pub max: u8,
    /// Bits one step adds: 4 (a hex digit) when the base was written in
    /// hex digits, 1 when in bits.
    pub step: u8,
}

impl DifficultyRule {
    /// A fixed difficulty of `n` hex digits (`4 × n` bits).
    pub const fn hex(n: u8) -> Self {
        Self {
            base: 4 * n,
            max: 4 * n,
            step: 4,
        }
    }

    /// A fixed difficulty of `n` bits.
    pub const fn bits(n: u8) -> Self {
        Self {
            base: n,
            max: n,
            step: 1,
        }
    }

    /// From `base` up to `max`, stepping in the base's unit.
    pub const fn rising(base: Difficulty, max: Difficulty) -> Self {
        Self {
            base: base.bits,
            max: max.bits,
            step: if base.in_bits { 1 } else { 4 },
        }
    }

    /// The bits to ask of a client with `strikes` strikes that has had
    /// `over` requests refused in about the last window of a limit of
    /// `limit` requests:
    ///
    /// `base + step × (⌊log2(1 + over / limit)⌋ + ⌊strikes / 2⌋)`, at most `max`.
    ///
    /// A step is one more hex zero (16 times the work) or one more bit
    /// (twice the work). A client that keeps going at twice its limit pays
    /// one step more, at four times two steps, at eight times three; every
    /// two strikes add one.
    /// Whether the price rises with abuse (`max=` above the base).
    pub fn rises(&self) -> bool {
        self.max > self.base
    }

    pub fn for_client(&self, strikes: u32, over: u32, limit: u32) -> u8 {
        let times_over = over / limit.max(1);
        let by_volume = (times_over.saturating_add(1)).ilog2();
        let by_strikes = strikes / 2;
        let raised = u32::from(self.base).saturating_add(
            u32::from(self.step).saturating_mul(by_volume.saturating_add(by_strikes)),
        );
        let ceiling = self.max.clamp(MIN_BITS, MAX_BITS);
        raised.min(u32::from(ceiling)) as u8
    }
}

/// The identity of a location's price policy, signed into its challenges
/// (docs/protocol.md §4, "What a token binds"): its limits in order, how
/// each counts (exact or `approx`), whose count each is (its `key=` as written), and
/// its difficulty. Two locations with the same limits, keys and difficulty
/// ask the same price and share it; the same numbers counted per another
/// key do not (a site-wide count far over its limit asks more than a
/// client's own). The identity is the same on every node and across
/// reloads, and a location without `key=` keeps the one it had before keys
/// joined it. The work (`pow_shield_work`) is part of the price: an Equi-X
/// location's identity has one more word, and a SHA-256 location keeps
/// the identity it had before Equi-X.
pub fn price_policy(limits: &Limits, difficulty: DifficultyRule, work: Work) -> u64 {
    let mut words = [0u64; 5 + 3 * MAX_LIMITS];
    words[0] = counting_word(limits);
    words[1] = u64::from(difficulty.base);
    words[2] = u64::from(difficulty.max);
    words[3] = u64::from(difficulty.step);
    let mut len = 4;
    for limit in limits.rates() {
        words[len] = u64::from(limit.requests);
        words[len + 1] = limit.window_ms;
        len += 2;
    }
    if limits.any_keyed() {
        // 0 for a limit counted per client key.
        for i in 0..limits.len() {
            words[len] = limits.key(i).map_or(0, KeyId::get);
            len += 1;
        }
    }
    if work == Work::Equix {
        words[len] = EQUIX_WORD;
        len += 1;
    }
    crate::protocol::policy_id(&words[..len])
}

/// How a location's limits count, as one word: 0 all exact, 1 all
/// `approx` (the words of a location before each line counted its own
/// way), else bit 32 and a bit per `approx` limit, by its place.
fn counting_word(limits: &Limits) -> u64 {
    let each = limits.as_slice();
    match (each.iter().all(|l| l.approx), each.iter().any(|l| l.approx)) {
        (_, false) => 0,
        (true, true) => 1,
        (false, true) => {
            let mask = each
                .iter()
                .enumerate()
                .filter(|(_, l)| l.approx)
                .fold(0u64, |mask, (i, _)| mask | 1 << i);
            1 << 32 | mask
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `4 max=8`: 16 to 32 bits by hex digits.
    const RISING: DifficultyRule = DifficultyRule::rising(Difficulty::hex(4), Difficulty::hex(8));

    /// `18b max=24b`: by single bits.
    const RISING_BITS: DifficultyRule =
        DifficultyRule::rising(Difficulty::bits(18), Difficulty::bits(24));

    #[test]
    fn a_fresh_client_gets_the_base() {
        assert_eq!(RISING.for_client(0, 0, 60), 16);
        assert_eq!(RISING.for_client(1, 59, 60), 16);
        assert_eq!(RISING_BITS.for_client(1, 59, 60), 18);
    }

    #[test]
    fn volume_beyond_the_limit_adds_a_step_per_doubling() {
        let at = |over| RISING.for_client(0, over, 60);
        assert_eq!([at(60), at(179), at(180), at(420)], [20, 20, 24, 28]);
    }

    #[test]
    fn a_bits_rule_steps_one_bit_per_doubling_twice_the_work() {
        let at = |over| RISING_BITS.for_client(0, over, 60);
        assert_eq!([at(60), at(179), at(180), at(420)], [19, 19, 20, 21]);
    }

    #[test]
    fn every_two_strikes_add_a_step() {
        let at = |strikes| RISING.for_client(strikes, 0, 60);
        assert_eq!([at(1), at(2), at(3), at(4)], [16, 20, 20, 24]);
        let at = |strikes| RISING_BITS.for_client(strikes, 0, 60);
        assert_eq!([at(1), at(2), at(3), at(4)], [18, 19, 19, 20]);
    }

    #[test]
    fn never_above_max() {
        assert_eq!(RISING.for_client(100, u32::MAX, 1), 32);
        assert_eq!(RISING_BITS.for_client(100, u32::MAX, 1), 24);
        assert_eq!(DifficultyRule::hex(12).for_client(9, 9_999, 1), 48);
        // A hex step that would pass a max written in bits stops at it.
        let mixed = DifficultyRule::rising(Difficulty::hex(4), Difficulty::bits(18));
        assert_eq!(mixed.for_client(0, 60, 60), 18);
    }

    #[test]
    fn a_fixed_difficulty_never_rises() {
        assert_eq!(DifficultyRule::hex(4).for_client(4, 10_000, 10), 16);
        assert_eq!(DifficultyRule::bits(18).for_client(4, 10_000, 10), 18);
    }

    /// `pow_shield_limit 3 1m`, counted per client key or per `key=`.
    fn three_a_minute(key: Option<&str>) -> Limits {
        let mut limits = Limits::NONE;
        let limit = crate::limiter::RateLimit {
            requests: 3,
            window_ms: 60_000,
        };
        limits.push_keyed(limit, None, key.map(KeyId::of)).unwrap();
        limits
    }

    #[test]
    fn the_same_numbers_counted_per_another_key_are_another_price_policy() {
        let bits = DifficultyRule::rising(Difficulty::bits(8), Difficulty::bits(20));
        let policy = |key| price_policy(&three_a_minute(key), bits, Work::Sha256);
        let (client, site, net) = (
            policy(None),
            policy(Some("site")),
            policy(Some("$pow_shield_net")),
        );
        assert_ne!(
            client, site,
            "/a/ and /b/ of issue 36: 3 1m, and 3 1m key=site"
        );
        assert_ne!(site, net);
        assert_ne!(client, net);
        assert_eq!(
            site,
            policy(Some("site")),
            "the same key written alike: shared"
        );
        // A key in a stack of limits counts as well.
        let mut stacked = three_a_minute(None);
        let hourly = crate::limiter::RateLimit {
            requests: 100,
            window_ms: 3_600_000,
        };
        stacked.push(hourly, None).unwrap();
        let mut keyed = three_a_minute(None);
        keyed
            .push_keyed(hourly, None, Some(KeyId::of("site")))
            .unwrap();
        assert_ne!(
            price_policy(&stacked, bits, Work::Sha256),
            price_policy(&keyed, bits, Work::Sha256)
        );
    }

    #[test]
    fn a_location_without_key_keeps_the_price_policy_it_had() {
        // Its limits' numbers, counting and difficulty only: tokens issued
        // before keys joined the policy stay valid across an upgrade.
        let bits = DifficultyRule::rising(Difficulty::bits(8), Difficulty::bits(20));
        assert_eq!(
            price_policy(&three_a_minute(None), bits, Work::Sha256),
            crate::protocol::policy_id(&[0, 8, 20, 1, 3, 60_000])
        );
    }

    #[test]
    fn each_limits_counting_is_part_of_the_price_policy_and_uniform_ones_keep_theirs() {
        let bits = DifficultyRule::bits(8);
        let (minute, hour) = (
            crate::limiter::RateLimit {
                requests: 100,
                window_ms: 60_000,
            },
            crate::limiter::RateLimit {
                requests: 1000,
                window_ms: 3_600_000,
            },
        );
        let stack = |a: bool, b: bool| {
            let mut limits = Limits::NONE;
            for (rate, approx) in [(minute, a), (hour, b)] {
                let limit = crate::limiter::Limit::new(rate);
                limits
                    .add(if approx { limit.approx() } else { limit })
                    .unwrap();
            }
            price_policy(&limits, bits, Work::Sha256)
        };
        let words = |approx| [approx, 8, 8, 1, 100, 60_000, 1000, 3_600_000];
        assert_eq!(stack(false, false), crate::protocol::policy_id(&words(0)));
        assert_eq!(stack(true, true), crate::protocol::policy_id(&words(1)));
        let mixed = [stack(true, false), stack(false, true)];
        assert!(!mixed.contains(&stack(false, false)) && !mixed.contains(&stack(true, true)));
        assert_ne!(mixed[0], mixed[1]);
    }

    #[test]
    fn the_same_price_in_equix_is_another_price_policy() {
        let bits = DifficultyRule::bits(4);
        let limits = three_a_minute(None);
        assert_ne!(
            price_policy(&limits, bits, Work::Sha256),
            price_policy(&limits, bits, Work::Equix),
            "a SHA-256 token buys nothing at an Equi-X location"
        );
    }

    #[test]
    fn it_is_monotone_in_strikes_and_volume() {
        for rule in [RISING, RISING_BITS] {
            let mut last = 0;
            for step in 0..200u32 {
                let d = rule.for_client(step / 20, step * 7, 10);
                assert!(d >= last);
                last = d;
            }
        }
    }
}

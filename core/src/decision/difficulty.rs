//! Rising difficulty (`pow_shield_difficulty <n> max=<m>`): the price of a
//! request grows with the client's abuse.

use crate::protocol::{MAX_DIFFICULTY, MIN_DIFFICULTY};

/// `pow_shield_difficulty <base> [max=<max>]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DifficultyRule {
    pub base: u8,
    /// Equal to `base` when difficulty does not rise.
    pub max: u8,
}

impl DifficultyRule {
    /// A fixed difficulty.
    pub const fn fixed(n: u8) -> Self {
        Self { base: n, max: n }
    }

    /// The difficulty to ask of a client with `strikes` strikes that has
    /// had `over` requests refused in about the last window of a limit of
    /// `limit` requests:
    ///
    /// `base + ⌊log2(1 + over / limit)⌋ + ⌊strikes / 2⌋`, at most `max`.
    ///
    /// Each step is one more hex zero: 16 times the work. A client that
    /// keeps going at twice its limit pays one step more, at four times
    /// two steps, at eight times three; every two strikes add one.
    pub fn for_client(&self, strikes: u32, over: u32, limit: u32) -> u8 {
        let times_over = over / limit.max(1);
        let by_volume = (times_over.saturating_add(1)).ilog2();
        let by_strikes = strikes / 2;
        let raised = u32::from(self.base)
            .saturating_add(by_volume)
            .saturating_add(by_strikes);
        let ceiling = self.max.clamp(MIN_DIFFICULTY, MAX_DIFFICULTY);
        raised.min(u32::from(ceiling)) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RISING: DifficultyRule = DifficultyRule { base: 4, max: 8 };

    #[test]
    fn a_fresh_client_gets_the_base() {
        assert_eq!(RISING.for_client(0, 0, 60), 4);
        assert_eq!(RISING.for_client(1, 59, 60), 4);
    }

    #[test]
    fn volume_beyond_the_limit_adds_a_step_per_doubling() {
        let at = |over| RISING.for_client(0, over, 60);
        assert_eq!([at(60), at(179), at(180), at(420)], [5, 5, 6, 7]);
    }

    #[test]
    fn every_two_strikes_add_a_step() {
        let at = |strikes| RISING.for_client(strikes, 0, 60);
        assert_eq!([at(1), at(2), at(3), at(4)], [4, 5, 5, 6]);
    }

    #[test]
    fn never_above_max() {
        assert_eq!(RISING.for_client(100, u32::MAX, 1), 8);
        assert_eq!(
            DifficultyRule { base: 12, max: 12 }.for_client(9, 9_999, 1),
            12
        );
    }

    #[test]
    fn a_fixed_difficulty_never_rises() {
        assert_eq!(DifficultyRule::fixed(4).for_client(4, 10_000, 10), 4);
    }

    #[test]
    fn it_is_monotone_in_strikes_and_volume() {
        let mut last = 0;
        for step in 0..200u32 {
            let d = RISING.for_client(step / 20, step * 7, 10);
            assert!(d >= last);
            last = d;
        }
    }
}

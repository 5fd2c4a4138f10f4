//! A call's deadline stamped over its placeholder as `clock::stamp` does,
//! its digits made from the last call's: calls queued one after another
//! are due within the same second, so only the last three digits of their
//! deadlines differ (measured: all 13 made anew cost some 80 instructions
//! a call).

use crate::redis::clock::{DEADLINE_DIGITS, NO_DEADLINE_WORD};
use crate::redis::script_call::digits::padded;

/// The last deadline stamped, and its digits.
#[derive(Default)]
pub(super) struct LastStamp {
    ms: u64,
    digits: [u8; DEADLINE_DIGITS],
}

/// The digits before a deadline's: `$13\r\n`.
const HEAD: usize = NO_DEADLINE_WORD.len() - DEADLINE_DIGITS - 2;

impl LastStamp {
    /// Writes `deadline_ms` over the placeholder `command` ends with
    /// ([`NO_DEADLINE_WORD`]); `false` (nothing written) for a command
    /// that does not end with one, or a deadline beyond its digits.
    pub(super) fn stamp(&mut self, command: &mut [u8], deadline_ms: u64) -> bool {
        let Some(start) = command.len().checked_sub(NO_DEADLINE_WORD.len()) else {
            return false;
        };
        let Some(word) = command.get_mut(start..) else {
            return false;
        };
        if word != NO_DEADLINE_WORD || deadline_ms >= 10u64.pow(DEADLINE_DIGITS as u32) {
            return false;
        }
        let digits = self.digits_of(deadline_ms);
        match word.get_mut(HEAD..HEAD + DEADLINE_DIGITS) {
            Some(place) => place.copy_from_slice(&digits),
            None => return false,
        }
        true
    }

    /// `ms`'s 13 digits, zeros before: the last three written over the
    /// last deadline's, when only they differ.
    fn digits_of(&mut self, ms: u64) -> [u8; DEADLINE_DIGITS] {
        let second = ms / 1000;
        if second != self.ms / 1000 || self.ms == 0 {
            self.digits = padded::<DEADLINE_DIGITS>(ms);
        } else {
            let [.., hundreds, tens, ones] = &mut self.digits;
            let within = (ms - second * 1000) as u16;
            *hundreds = b'0' + (within / 100) as u8;
            *tens = b'0' + (within / 10 % 10) as u8;
            *ones = b'0' + (within % 10) as u8;
        }
        self.ms = ms;
        self.digits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::clock::stamp;

    fn call() -> Vec<u8> {
        [&b"*3\r\n$8\r\nEVALSHA\r\n$1\r\nk\r\n"[..], NO_DEADLINE_WORD].concat()
    }

    #[test]
    fn each_deadline_is_stamped_as_clock_stamp_writes_it_whatever_came_before() {
        let mut last = LastStamp::default();
        let deadlines = [
            1_765_000_000_299,
            1_765_000_000_300,
            1_765_000_000_999,
            1_765_000_001_000,
            1_765_000_001_007,
            1_765_000_001_007,
            1_765_000_000_042,
            42,
            1_000,
            999,
            0,
            7,
            9_999_999_999_999,
            1_765_000_001_070,
        ];
        for ms in deadlines {
            let (mut ours, mut clocks) = (call(), call());
            assert_eq!(last.stamp(&mut ours, ms), stamp(&mut clocks, ms), "{ms}");
            assert_eq!(ours, clocks, "{ms}");
        }
    }

    #[test]
    fn a_first_deadline_under_a_second_is_stamped_whole() {
        // (A fresh `LastStamp` has no digits to reuse.)
        for first in [[42, 7], [0, 999], [7, 1_765_000_000_007]] {
            let mut last = LastStamp::default();
            for ms in first {
                let (mut ours, mut clocks) = (call(), call());
                assert_eq!(last.stamp(&mut ours, ms), stamp(&mut clocks, ms), "{ms}");
                assert_eq!(ours, clocks, "{ms}");
            }
        }
    }

    #[test]
    fn only_a_placeholder_is_stamped() {
        let mut last = LastStamp::default();
        let mut cmd = call();
        assert!(last.stamp(&mut cmd, 1_765_000_000_299));
        assert!(cmd.ends_with(b"$13\r\n1765000000299\r\n"));
        // Stamped once: a second stamp finds no placeholder.
        let stamped = cmd.clone();
        assert!(!last.stamp(&mut cmd, 1_765_000_000_300));
        assert_eq!(cmd, stamped);
        // Too large for 13 digits: left alone (no deadline).
        let mut cmd = call();
        assert!(!last.stamp(&mut cmd, 10_000_000_000_000));
        assert_eq!(cmd, call());
        for other in [
            &b"*1\r\n$4\r\nPING\r\n"[..],
            b"",
            b"$13\r\n1765000000299\r\n",
        ] {
            let mut cmd = other.to_vec();
            assert!(!last.stamp(&mut cmd, 5));
            assert_eq!(cmd, other);
        }
    }
}

//! Redis's clock as one connection sees it (SPEC §6: "A call that Redis
//! runs after the node gave up on it changes nothing"; docs/operations.md,
//! "Calls Redis runs late").
//!
//! Every script call that writes ends with its deadline in Redis's clock
//! (epoch ms, what the scripts' `TIME` reads): a call that starts after it
//! answers "expired" and writes nothing. The node's deadlines are in
//! nginx's millisecond clock; the offset between the two is learnt from
//! Redis's `TIME` in the handshake of every connection and from every
//! "expired" reply, each read no later than the node handles its reply, so
//! the offset learnt is never ahead of the true one: a call's deadline in
//! Redis's clock comes no later than the node gives up on it.

use redis_protocol::resp2::types::OwnedFrame;

use super::script_call::digits::padded;

/// Digits of a deadline: epoch ms keep 13 digits until the year 2286.
pub const DEADLINE_DIGITS: usize = 13;

/// The deadline a call is built with, until its connection stamps it
/// (`stamp`): no deadline (the scripts read 0 as none). Our encoder never
/// pads a number with zeros, so no other last argument looks like this.
pub const NO_DEADLINE: &[u8; DEADLINE_DIGITS] = b"0000000000000";

/// What a script answers when its call came after its deadline: a status
/// reply, `EXPIRED <Redis's ms>`.
pub const EXPIRED: &str = "EXPIRED";

/// Taken off every sample: Redis's `TIME` is cut to the millisecond, and
/// so is nginx's clock.
const MARGIN_MS: i64 = 1;

/// The offset of Redis's clock from the node's, as last learnt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedisClock {
    offset_ms: Option<i64>,
}

impl RedisClock {
    /// Redis's clock read `redis_ms` before the node handled the reply
    /// at `local_ms` (nginx's clock, read no earlier than the reply came):
    /// the offset, never ahead of the true one. The latest sample wins (a
    /// clock step on either side is learnt at the next one).
    pub fn learn(&mut self, redis_ms: u64, local_ms: u64) {
        let (Ok(redis), Ok(local)) = (i64::try_from(redis_ms), i64::try_from(local_ms)) else {
            return;
        };
        self.offset_ms = Some(redis - local - MARGIN_MS);
    }

    /// Whether an offset was learnt (the connection's first handshake
    /// answered).
    pub fn is_known(&self) -> bool {
        self.offset_ms.is_some()
    }

    /// A call due back by `local_deadline_ms` (nginx's clock), in Redis's
    /// clock; `None` (no deadline) before an offset is learnt, or for a
    /// time that does not fit the deadline's digits.
    pub fn deadline(&self, local_deadline_ms: u64) -> Option<u64> {
        let local = i64::try_from(local_deadline_ms).ok()?;
        let redis = local.checked_add(self.offset_ms?)?;
        u64::try_from(redis)
            .ok()
            .filter(|ms| (1..10u64.pow(DEADLINE_DIGITS as u32)).contains(ms))
    }
}

/// Writes `deadline_ms` over the placeholder a call ends with
/// ([`NO_DEADLINE`], its last argument); `false` (nothing written) for a
/// command that does not end with one.
pub fn stamp(command: &mut [u8], deadline_ms: u64) -> bool {
    // The placeholder's whole word, compared at once (measured: three
    // comparisons and a digit at a time cost some 180 instructions a call).
    let Some(start) = command.len().checked_sub(PLACEHOLDER_WORD) else {
        return false;
    };
    let Ok(word) = <&mut [u8; PLACEHOLDER_WORD]>::try_from(&mut command[start..]) else {
        return false;
    };
    if word != NO_DEADLINE_WORD || deadline_ms >= 10u64.pow(DEADLINE_DIGITS as u32) {
        return false;
    }
    // All 13 digits, zeros before included, in a fixed number of steps
    // (measured: a loop of a pair a step until the number ends cost some
    // 60 instructions more a call).
    let Some(digits) = word.get_mut(HEAD..HEAD + DEADLINE_DIGITS) else {
        return false;
    };
    digits.copy_from_slice(&padded::<DEADLINE_DIGITS>(deadline_ms));
    true
}

/// `$13\r\n`, before the placeholder's digits.
const HEAD: usize = 5;

/// The placeholder's whole word: `$13\r\n`, its digits and `\r\n`.
const PLACEHOLDER_WORD: usize = HEAD + DEADLINE_DIGITS + 2;

/// [`NO_DEADLINE`] as the last word of a call (RESP's bulk string), as
/// a call is built with it and [`stamp`] finds it.
pub const NO_DEADLINE_WORD: &[u8; PLACEHOLDER_WORD] = b"$13\r\n0000000000000\r\n";

/// Redis's clock in a `TIME` reply (seconds and microseconds), in ms.
pub fn time_ms(frame: &OwnedFrame) -> Option<u64> {
    let OwnedFrame::Array(parts) = frame else {
        return None;
    };
    let [OwnedFrame::BulkString(s), OwnedFrame::BulkString(us)] = parts.as_slice() else {
        return None;
    };
    let n = |b: &[u8]| core::str::from_utf8(b).ok()?.parse::<u64>().ok();
    n(s)?.checked_mul(1000)?.checked_add(n(us)? / 1000)
}

/// Redis's clock in a script's "expired" reply, if `frame` is one.
pub fn expired_ms(frame: &OwnedFrame) -> Option<u64> {
    let OwnedFrame::SimpleString(text) = frame else {
        return None;
    };
    let text = core::str::from_utf8(text).ok()?;
    text.strip_prefix(EXPIRED)?.strip_prefix(' ')?.parse().ok()
}

#[cfg(test)]
mod tests;

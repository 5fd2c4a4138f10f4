//! What the scripts' arguments say (`Scripts`'s KEYS and ARGV), written as
//! the scripts read them.

use crate::limiter::breaker::BreakerRules;
use crate::store::take_back::Back;
use crate::store::{Counted, Offence};

/// Most clients one batch call carries (one Redis; in a Redis Cluster each
/// client's keys are in its own slot: one client per call). Its reply, five
/// decimal integers each, stays within a bulk string the node accepts
/// (`redis::command::MAX_BULK`).
pub const BATCH_CLIENTS: usize = 32;

/// What a refusal is, as the check scripts' `ARGV[4]` (the stacked one's
/// `ARGV[2]`) says it.
pub fn offence(offence: Offence) -> u64 {
    match offence {
        Offence::None => 0,
        Offence::Unpaid => 1,
        Offence::Failed => 2,
    }
}

/// The spend script's `ARGV[6]`: whether the zone already decided the
/// spend (`decided`: written now, whatever the breaker says) and what it
/// gives back of the client's strikes (`store::take_back`): nothing (2), one
/// unpaid strike if held (4), or one, owed if not held yet (0); the sum.
pub fn spend_mode(decided: bool, back: Back) -> u64 {
    let back = match back {
        Back::OneUnpaidOrOwed => 0,
        Back::Nothing => 2,
        Back::OneUnpaid => 4,
    };
    u64::from(decided) + back
}

/// The red-zone rules as the scripts' four arguments (0 = off).
pub fn rules(rules: BreakerRules) -> [u64; 4] {
    let (threshold, ttl) = rules.strikes.map_or((0, 0), |s| (s.threshold, s.ttl_ms));
    let (after, ban) = rules.ban.map_or((0, 0), |b| (b.after, b.ttl_ms));
    [threshold.into(), ttl, after.into(), ban]
}

/// Writes a sorted-set member unique across nodes, workers and requests
/// within one millisecond: `node_id`, worker `pid` and a per-worker sequence
/// number, in hex. `node_id` must differ between nginx nodes (a random value
/// per worker start also covers pid reuse).
pub fn write_member(out: &mut Vec<u8>, node_id: u64, pid: u32, seq: u64) {
    write_member_head(out, node_id, pid);
    lower_hex(out, seq);
}

/// What every member of a worker starts with: [`write_member`] before its
/// sequence number (`Calls` makes it once).
pub fn write_member_head(out: &mut Vec<u8>, node_id: u64, pid: u32) {
    lower_hex(out, node_id);
    out.push(b':');
    lower_hex(out, pid.into());
    out.push(b':');
}

/// `n` in lower-case hex without leading zeros (as `{:x}`), without
/// `core::fmt`: one member per shielded request. Its 16 digits made at
/// once, each nibble spread to a byte of its own (measured: a loop of a
/// digit at a time cost some 8 instructions a digit), then the
/// significant ones copied.
pub fn lower_hex(out: &mut Vec<u8>, n: u64) {
    let digits = (64 - n.leading_zeros()).div_ceil(4).max(1) as usize;
    // (A worker's sequence numbers, most members: 8 digits at most, made
    // in one half; measured, both halves cost some 30 instructions more.)
    if let Ok(n) = u32::try_from(n) {
        let text = hex_digits(n);
        out.extend_from_slice(text.get(8 - digits.min(8)..).unwrap_or_default());
        return;
    }
    let mut text = [0u8; 16];
    text[..8].copy_from_slice(&hex_digits((n >> 32) as u32));
    text[8..].copy_from_slice(&hex_digits(n as u32));
    out.extend_from_slice(&text[16 - digits..]);
}

/// The 8 lower-case hex digits of `n`, the most significant first.
fn hex_digits(n: u32) -> [u8; 8] {
    // Nibble i of `n` to byte i (from the least significant).
    let mut x = u64::from(n);
    x = (x | x << 16) & 0x0000_ffff_0000_ffff;
    x = (x | x << 8) & 0x00ff_00ff_00ff_00ff;
    x = (x | x << 4) & 0x0f0f_0f0f_0f0f_0f0f;
    // '0' + d, and 'a' - '0' - 10 more where d > 9 (d + 6 carries into
    // bit 4 exactly then).
    let letters = ((x + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
    (x + 0x3030_3030_3030_3030 + letters * 39).to_be_bytes()
}

/// The stacked script's `ARGV[7]` (and the undo script's `ARGV[2]`): a
/// `1` for each limit counted `approx` (a counter), a `0` for each exact
/// one (a log), in the order sent.
pub fn write_approx(out: &mut Vec<u8>, approx: impl Iterator<Item = bool>) {
    out.extend(approx.map(|approx| match approx {
        true => b'1',
        false => b'0',
    }));
}

/// The stacked script's `ARGV[8]`: a `1` for each limit counted per client
/// key, a `0` for each counted per a `key=` value, in the order sent (the
/// script strikes an unpaid refusal only by the client's own limit).
pub fn write_own<'a>(out: &mut Vec<u8>, whose: impl Iterator<Item = Counted<'a>>) {
    out.extend(whose.map(|whose| match whose {
        Counted::Own(_) => b'0',
        Counted::Client(_) | Counted::Spends(_) => b'1',
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::breaker::{BanRule, StrikeRule};

    #[test]
    fn the_worst_batch_reply_fits_a_bulk_string_the_node_accepts() {
        let worst = vec![u64::MAX.to_string(); 5 * BATCH_CLIENTS].join(" ");
        assert!(worst.len() <= crate::redis::command::MAX_BULK);
    }

    #[test]
    fn a_refusal_is_passed_as_0_nothing_1_unpaid_2_failed() {
        assert_eq!(offence(Offence::None), 0);
        assert_eq!(offence(Offence::Unpaid), 1);
        assert_eq!(offence(Offence::Failed), 2);
    }

    #[test]
    fn a_spend_says_whether_the_zone_decided_it_and_what_it_gives_back() {
        // (decided, what comes back) → ARGV[6] (spend.lua: 1 decided,
        // 2 nothing to give back, 4 never owed)
        let table = [
            (false, Back::OneUnpaidOrOwed, 0),
            (true, Back::OneUnpaidOrOwed, 1),
            (false, Back::Nothing, 2),
            (true, Back::Nothing, 3),
            (false, Back::OneUnpaid, 4),
            (true, Back::OneUnpaid, 5),
        ];
        for (decided, back, want) in table {
            assert_eq!(spend_mode(decided, back), want, "{decided} {back:?}");
        }
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
    fn lower_hex_is_the_hex_of_every_number_without_leading_zeros() {
        let shifts = (0..64).flat_map(|i| [1u64 << i, (1u64 << i) - 1, !0u64 >> i]);
        let more = [
            0,
            9,
            10,
            15,
            16,
            0xabcdef,
            0x9a9a_9a9a,
            0xfedc_ba98_7654_3210,
        ];
        for n in shifts.chain(more) {
            let mut out = b"x".to_vec();
            lower_hex(&mut out, n);
            assert_eq!(out, format!("x{n:x}").into_bytes());
        }
    }

    #[test]
    fn rules_are_four_integers_zero_when_off() {
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
}

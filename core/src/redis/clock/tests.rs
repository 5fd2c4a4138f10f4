use super::*;
use crate::redis::script_call::ScriptCall;

/// Redis's epoch ms, as `TIME` reads it in these tests.
const REDIS: u64 = 1_765_000_000_000;

#[test]
fn a_deadline_in_redis_clock_is_the_local_one_plus_the_offset_learnt_less_a_ms() {
    // (TIME read, handled at (local), a call due by (local)) → its deadline
    #[rustfmt::skip]
    let table = [
        // Learnt at local 1 000: Redis is REDIS - 1 000 ahead.
        (REDIS, 1_000, 1_300, Some(REDIS + 300 - 1)),
        // nginx's clock may be far along (days of uptime).
        (REDIS, 900_000_000, 900_000_300, Some(REDIS + 300 - 1)),
        // A call due before the sample (queued earlier): earlier in Redis too.
        (REDIS, 5_000, 4_700, Some(REDIS - 300 - 1)),
        // Redis's clock near the epoch: a deadline of at least 1 ms or none.
        (10, 1_000, 1_005, Some(14)),
        (10, 1_000, 900, None),
    ];
    for (i, (redis_ms, at, due, want)) in table.into_iter().enumerate() {
        let mut clock = RedisClock::default();
        clock.learn(redis_ms, at);
        assert!(clock.is_known());
        assert_eq!(clock.deadline(due), want, "row {i}");
    }
}

#[test]
fn before_any_sample_a_call_carries_no_deadline() {
    let clock = RedisClock::default();
    assert!(!clock.is_known());
    assert_eq!(clock.deadline(1_300), None);
}

#[test]
fn the_latest_sample_wins_so_a_clock_step_is_learnt_at_the_next_one() {
    let mut clock = RedisClock::default();
    clock.learn(REDIS, 1_000);
    // Redis's clock stepped back 10 s; an expired reply (or the next
    // handshake) says so.
    clock.learn(REDIS - 10_000 + 500, 1_500);
    assert_eq!(clock.deadline(1_800), Some(REDIS - 10_000 + 800 - 1));
    // ... and forward 1 h.
    clock.learn(REDIS + 3_600_000, 2_000);
    assert_eq!(clock.deadline(2_300), Some(REDIS + 3_600_300 - 1));
}

#[test]
fn the_offset_learnt_never_runs_ahead_of_redis() {
    // Redis read TIME at some moment between the node's send (local 990)
    // and its handling of the reply (local 1 000): the true offset is
    // between REDIS - 1 000 and REDIS - 990. The deadline is never later
    // in Redis's clock than the node's own.
    let mut clock = RedisClock::default();
    clock.learn(REDIS, 1_000);
    for true_offset in [REDIS - 1_000, REDIS - 995, REDIS - 990] {
        let gives_up = 1_300 + true_offset;
        assert!(clock.deadline(1_300).unwrap() < gives_up);
    }
}

fn call_ending_with_a_deadline() -> Vec<u8> {
    let mut call = ScriptCall::new("0123456789abcdef0123456789abcdef01234567", 1, 2);
    call.push(|w| w.extend_from_slice(b"k")).num(7).deadline();
    call.finish().0
}

#[test]
fn a_connection_stamps_the_deadline_over_the_placeholder_only() {
    let mut cmd = call_ending_with_a_deadline();
    assert!(cmd.ends_with(b"$13\r\n0000000000000\r\n"));
    let before = cmd.clone();
    assert!(stamp(&mut cmd, REDIS + 299));
    assert!(cmd.ends_with(b"$13\r\n1765000000299\r\n"));
    assert_eq!(cmd.len(), before.len(), "in place");
    // Stamped once: a second stamp finds no placeholder.
    assert!(!stamp(&mut cmd, 5));
    // A short deadline is zero-padded (still 13 digits).
    let mut cmd = before.clone();
    assert!(stamp(&mut cmd, 42));
    assert!(cmd.ends_with(b"$13\r\n0000000000042\r\n"));
    // Too large for 13 digits: left alone (no deadline).
    let mut cmd = before.clone();
    assert!(!stamp(&mut cmd, 10_000_000_000_000));
    assert_eq!(cmd, before);
    // Commands without the placeholder: untouched.
    for other in [
        &b"*1\r\n$4\r\nPING\r\n"[..],
        b"",
        b"$13\r\n1765000000299\r\n",
    ] {
        let mut cmd = other.to_vec();
        assert!(!stamp(&mut cmd, 5));
        assert_eq!(cmd, other);
    }
}

#[test]
fn redis_time_and_an_expired_reply_read_as_ms() {
    let bulk = |s: &str| OwnedFrame::BulkString(s.as_bytes().to_vec());
    let time = OwnedFrame::Array(vec![bulk("1765000000"), bulk("123999")]);
    assert_eq!(time_ms(&time), Some(REDIS + 123));
    assert_eq!(
        time_ms(&OwnedFrame::Array(vec![bulk("x"), bulk("1")])),
        None
    );
    assert_eq!(time_ms(&OwnedFrame::Integer(1)), None);

    let status = |s: &str| OwnedFrame::SimpleString(s.as_bytes().to_vec());
    assert_eq!(
        expired_ms(&status("EXPIRED 1765000000123")),
        Some(REDIS + 123)
    );
    for other in [
        status("OK"),
        status("EXPIRED"),
        status("EXPIRED x"),
        bulk("EXPIRED 1"),
    ] {
        assert_eq!(expired_ms(&other), None, "{other:?}");
    }
}

#[test]
fn the_placeholder_word_is_the_placeholder_as_a_bulk_string() {
    let mut word = format!("${DEADLINE_DIGITS}\r\n").into_bytes();
    word.extend_from_slice(NO_DEADLINE);
    word.extend_from_slice(b"\r\n");
    assert_eq!(word, NO_DEADLINE_WORD);
}

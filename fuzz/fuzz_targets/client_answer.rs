//! A response from a hostile server, read the way the client (`pow-shield`
//! CLI, reqwest middleware) reads it: `read_answer` on its status, headers
//! and body, and `http_date::parse` on any `Retry-After` date.
//!
//! Input: one byte, then the rest. Bit 7 set: the rest is a `Retry-After`
//! value, for `http_date::parse` alone. Otherwise its low 3 bits choose the
//! status and the rest is a response head (`Name: value` lines, then an
//! empty line) and its body.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use pow_shield_client::{http_date, read_answer, wire, Answer, Error};
use pow_shield_protocol::{hex_digits_for_bits, MAX_BITS};

/// Day and month names as the three date forms spell them.
const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const LONG_DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// The statuses the reader tells apart, and two it passes.
const STATUSES: [u16; 8] = [429, 409, 410, 422, 503, 200, 403, 444];

fuzz_target!(|data: &[u8]| {
    let [which, rest @ ..] = data else {
        return;
    };
    if which & 0x80 != 0 {
        if let Ok(value) = std::str::from_utf8(rest) {
            date(value);
        }
        return;
    }
    response(STATUSES[usize::from(which & 7)], rest);
});

fn response(status: u16, data: &[u8]) {
    let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], Some(&data[at + 2..])),
        None => (data, None),
    };
    let Ok(head) = std::str::from_utf8(head) else {
        return;
    };
    let headers: Vec<(&str, &str)> = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    };
    let answer = read_answer(status, header, body);

    let shield = header(wire::HEADER_SHIELD).map(str::trim);
    let retry_after = header("Retry-After").map(str::trim);
    let expected_wait = retry_after.and_then(|v| {
        if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
            // Too many digits: "forever", which no retry policy accepts.
            Some(Some(Duration::from_secs(v.parse().unwrap_or(u64::MAX))))
        } else {
            http_date::parse(v).map(|_| None)
        }
    });
    // The delay-seconds form exactly; a date as some wait.
    let check_wait = |wait: Option<Duration>| match expected_wait {
        None => assert_eq!(wait, None, "Retry-After {retry_after:?}"),
        Some(None) => assert!(wait.is_some(), "Retry-After {retry_after:?}"),
        Some(Some(secs)) => assert_eq!(wait, Some(secs)),
    };
    // The shield's own verdict comes first, whatever the status.
    match shield {
        Some(wire::SHIELD_BANNED) => {
            assert!(matches!(answer, Answer::Refused(Error::Banned { .. })))
        }
        Some(wire::SHIELD_BLOCKED) => {
            assert!(matches!(answer, Answer::Refused(Error::Blocked { .. })))
        }
        _ => {}
    }
    match answer {
        Answer::Refused(Error::Banned { status: s }) => {
            assert_eq!((shield, s), (Some(wire::SHIELD_BANNED), status));
        }
        Answer::Refused(Error::Blocked { status: s }) => {
            assert_eq!((shield, s), (Some(wire::SHIELD_BLOCKED), status));
        }
        Answer::Refused(Error::BadChallenge(_)) => {
            assert!(is_challenge_status(status));
        }
        Answer::Refused(other) => panic!("refused with {other:?}"),
        Answer::Unavailable { retry_after } => {
            assert_eq!(status, wire::UNAVAILABLE_STATUS);
            check_wait(retry_after);
        }
        Answer::Pass => {
            assert_ne!(status, wire::UNAVAILABLE_STATUS);
            assert!(
                !is_challenge_status(status) || header(wire::HEADER_CHALLENGE).is_none(),
                "a challenge header passed"
            );
        }
        Answer::Challenge(c) => {
            assert!(is_challenge_status(status) && c.status == status);
            assert!(!c.salt.is_empty());
            assert!(c.bits <= MAX_BITS);
            assert_eq!(c.difficulty, hex_digits_for_bits(c.bits));
            // The server's own minimum is never undercut: X-PoW-Bits, else
            // four bits per X-PoW-Difficulty digit.
            let number = |name| header(name).and_then(|d| d.trim().parse::<u8>().ok());
            match number(wire::HEADER_BITS) {
                Some(b) => assert!(c.bits >= b),
                None => {
                    if let Some(d) = number(wire::HEADER_DIFFICULTY) {
                        assert!(u16::from(c.bits) >= 4 * u16::from(d));
                    }
                }
            }
            if let Some(token) = header(wire::HEADER_CHALLENGE) {
                assert_eq!(c.token, token.trim());
            }
            check_wait(c.retry_after);
        }
    }
}

fn is_challenge_status(status: u16) -> bool {
    [429, 409, 410, 422].contains(&status)
}

/// A date that parses prints back, in each form it fits, as the same
/// instant (an independent inverse of the parser's day count).
fn date(value: &str) {
    let Some(t) = http_date::parse(value) else {
        return;
    };
    let days = t.div_euclid(86_400);
    let secs = t.rem_euclid(86_400);
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let (year, month, day) = civil_from_days(days);
    // Four-digit years; no leap second (httpdate reads none) to carry
    // 31 December 9999 into 10000.
    assert!((0..=9999).contains(&year), "{value:?}");
    let weekday = (days + 3).rem_euclid(7) as usize;
    let mon = MONTHS[month as usize - 1];
    let imf = format!(
        "{}, {day:02} {mon} {year:04} {h:02}:{m:02}:{s:02} GMT",
        DAYS[weekday]
    );
    assert_eq!(http_date::parse(&imf), Some(t), "{value:?} as {imf:?}");
    let asctime = format!(
        "{} {mon} {day:2} {h:02}:{m:02}:{s:02} {year:04}",
        DAYS[weekday]
    );
    assert_eq!(
        http_date::parse(&asctime),
        Some(t),
        "{value:?} as {asctime:?}"
    );
    if (1970..2070).contains(&year) {
        let rfc850 = format!(
            "{}, {day:02}-{mon}-{:02} {h:02}:{m:02}:{s:02} GMT",
            LONG_DAYS[weekday],
            year % 100
        );
        assert_eq!(
            http_date::parse(&rfc850),
            Some(t),
            "{value:?} as {rfc850:?}"
        );
    }
}

/// The proleptic Gregorian date of a day count from 1970-01-01: whole
/// 400-year cycles first, then years, months and days within one.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // 1970-01-01 is day 135_140 of the cycle that starts on 1600-01-01.
    let days = days + 135_140;
    let cycle = days.div_euclid(146_097);
    let mut left = days.rem_euclid(146_097);
    let mut year = 1600 + 400 * cycle;
    loop {
        let len = if is_leap(year) { 366 } else { 365 };
        if left < len {
            break;
        }
        left -= len;
        year += 1;
    }
    let mut month = 1;
    loop {
        let len = match month {
            2 if is_leap(year) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        if left < len {
            break;
        }
        left -= len;
        month += 1;
    }
    (year, month, left as u32 + 1)
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

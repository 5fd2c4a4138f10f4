//! The log's counts, per client and per keyed limit.

use super::*;

const TEN_S: u64 = 10_000;

type Log = RejectionLog<&'static str, u8>;

const NO_KEYS: [(LimitName, &[u8]); 0] = [];

fn c(client: &[u8]) -> Under<'_> {
    Under::Client(client)
}

fn count(noted: &Noted<u8>) -> Vec<u64> {
    noted.summaries.iter().flatten().map(|s| s.count).collect()
}

#[test]
fn the_first_rejection_of_a_client_and_reason_is_written() {
    let mut log = Log::new(16);
    assert!(log.note(c(b"a"), "over", 0, TEN_S, 0).write);
    assert!(!log.note(c(b"a"), "over", 1, TEN_S, 0).write);
    assert!(
        log.note(c(b"a"), "blocked", 2, TEN_S, 0).write,
        "a new reason"
    );
    assert!(log.note(c(b"b"), "over", 3, TEN_S, 0).write, "a new client");
}

#[test]
fn a_flood_gives_one_summary_per_interval_with_every_suppressed_rejection() {
    let mut log = Log::new(16);
    log.note(c(b"a"), "over", 0, TEN_S, 0);
    let mut summaries = Vec::new();
    // 12,345 more in the first 10 s, one per 0.5 ms
    for i in 1..=12_345u64 {
        let noted = log.note(c(b"a"), "over", i * 10_000 / 12_346, TEN_S, 0);
        assert!(!noted.write);
        summaries.extend(noted.summaries.into_iter().flatten());
    }
    assert!(
        summaries.is_empty(),
        "no summary before the interval is over"
    );
    let noted = log.note(c(b"a"), "over", TEN_S, TEN_S, 7);
    let [None, Some(summary)] = noted.summaries else {
        panic!("this client's summary: {:?}", noted.summaries);
    };
    assert_eq!(
        summary,
        Summary {
            count: 12_346,
            over_ms: TEN_S,
            tag: 7,
            unpaid: 0,
            paid: 0,
            limit: None,
        }
    );
    assert_eq!(
        summary.message("192.0.2.7").to_string(),
        "12,346 more rejections of client=192.0.2.7 in the last 10 s"
    );
    assert_eq!(
        count(&log.note(c(b"a"), "over", TEN_S + 1, TEN_S, 0)),
        Vec::<u64>::new()
    );
}

#[test]
fn the_timer_writes_what_is_left_and_then_forgets_a_quiet_client() {
    let mut log = Log::new(16);
    log.note(c(b"a"), "over", 0, TEN_S, 0);
    log.note(c(b"a"), "over", 1, TEN_S, 0);
    log.note(c(b"a"), "over", 2, TEN_S, 0);
    let mut out = Vec::new();
    log.due(9_999, |s| out.push(s.count));
    assert_eq!(out, Vec::<u64>::new(), "not before the interval is over");
    log.due(TEN_S, |s| out.push(s.count));
    assert_eq!(out, [2]);
    assert_eq!(log.len(), 1, "kept: it was rejected within the interval");
    log.due(20_002, |s| out.push(s.count));
    assert_eq!(out, [2], "nothing more to say");
    assert!(log.is_empty(), "quiet for an interval: forgotten");
    assert!(
        log.note(c(b"a"), "over", 20_003, TEN_S, 0).write,
        "written again"
    );
}

#[test]
fn a_client_back_after_a_quiet_interval_is_written_again() {
    let mut log = Log::new(16);
    log.note(c(b"a"), "over", 0, TEN_S, 0);
    assert!(log.note(c(b"a"), "over", TEN_S, TEN_S, 0).write);
}

#[test]
fn a_full_table_forgets_the_oldest_and_hands_out_its_count() {
    let mut log = Log::new(2);
    log.note(c(b"a"), "over", 0, TEN_S, 1);
    log.note(c(b"a"), "over", 1, TEN_S, 1);
    log.note(c(b"b"), "over", 2, TEN_S, 2);
    let noted = log.note(c(b"c"), "over", 3, TEN_S, 3);
    assert!(noted.write);
    assert_eq!(
        noted.summaries[0],
        Some(Summary {
            count: 1,
            over_ms: 3,
            tag: 1,
            unpaid: 0,
            paid: 0,
            limit: None,
        })
    );
    assert_eq!(log.len(), 2);
    // b had nothing suppressed: forgotten without a line
    assert_eq!(
        count(&log.note(c(b"d"), "over", 4, TEN_S, 4)),
        Vec::<u64>::new()
    );
    assert!(
        log.note(c(b"a"), "over", 5, TEN_S, 1).write,
        "a was forgotten"
    );
}

#[test]
fn drain_hands_out_every_count_left() {
    let mut log = Log::new(16);
    for client in [&b"a"[..], b"b", b"c"] {
        for t in 0..4 {
            log.note(c(client), "over", t, TEN_S, 0);
        }
    }
    let mut total = 0;
    log.drain(5, |s| total += s.count);
    assert_eq!(total, 9);
    assert!(log.is_empty());
}

#[test]
fn more_reasons_than_remembered_are_counted_not_lost() {
    let mut log = Log::new(16);
    let reasons = ["r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8"];
    let written = reasons
        .iter()
        .filter(|r| log.note(c(b"a"), **r, 0, TEN_S, 0).write)
        .count();
    assert_eq!(written, REASONS);
    let mut total = 0;
    log.drain(1, |s| total += s.count);
    assert_eq!(total, 1);
}

#[test]
fn paid_challenges_are_no_rejections_and_the_line_says_how_many_there_were() {
    let mut log = Log::new(16);
    let challenge = ("over", Kind::Challenge);
    log.note_as(c(b"a"), challenge, 0, TEN_S, 0);
    for t in 1..=10 {
        log.note_as(c(b"a"), challenge, t, TEN_S, 0);
    }
    for _ in 0..8 {
        log.paid(b"a", NO_KEYS);
    }
    log.note(c(b"a"), "spent", 11, TEN_S, 0);
    log.note(c(b"a"), "spent", 12, TEN_S, 0);
    let mut out = Vec::new();
    log.due(TEN_S, |s| out.push(s));
    let [summary] = &out[..] else {
        panic!("one summary: {out:?}");
    };
    assert_eq!((summary.count, summary.unpaid, summary.paid), (3, 2, 8));
    assert_eq!(
        summary.message("192.0.2.7").to_string(),
        "3 more rejections of client=192.0.2.7 in the last 10 s \
         (2 unpaid challenges; 8 paid, not counted)"
    );
}

#[test]
fn a_client_that_paid_every_challenge_has_no_summary() {
    let mut log = Log::new(16);
    for t in 0..5 {
        log.note_as(c(b"a"), ("over", Kind::Challenge), t, TEN_S, 0);
        log.paid(b"a", NO_KEYS);
    }
    let mut out = Vec::new();
    log.due(TEN_S, |s| out.push(s.count));
    assert_eq!(out, Vec::<u64>::new());
}

const NET: RefusedBy = RefusedBy {
    name: "net",
    key: Some(b"198.51.100.0/24"),
};

fn net() -> LimitName {
    LimitName::new("net").unwrap()
}

#[test]
fn a_scraper_rotating_through_a_refused_network_writes_one_line_for_it() {
    let mut log = Log::new(16);
    let mut written = 0;
    let mut summaries = Vec::new();
    // 10,000 addresses of the /24, one request each, in 10 s
    for i in 0..10_000u64 {
        let addr = format!("198.51.100.{}:{i}", i % 254);
        let under = noted_under(
            crate::decision::Outcome::Challenge,
            Some(NET),
            addr.as_bytes(),
        );
        let noted = log.note_as(under, ("over", Kind::Challenge), i, TEN_S, 0);
        written += usize::from(noted.write);
        summaries.extend(noted.summaries.into_iter().flatten());
    }
    assert_eq!(written, 1, "one full line for the /24");
    assert_eq!(log.len(), 1, "one entry, however many addresses");
    assert!(summaries.is_empty());
    log.due(TEN_S, |s| summaries.push(s));
    let [summary] = &summaries[..] else {
        panic!("one summary: {summaries:?}");
    };
    assert_eq!(summary.count, 9_999);
    assert_eq!(
        summary.message("198.51.100.7").to_string(),
        "9,999 more rejections under limit=net key=198.51.100.0/24 in the last 10 s"
    );
}

#[test]
fn a_client_and_its_networks_count_apart() {
    let mut log = Log::new(16);
    let client = &b"198.51.100.7"[..];
    assert!(log.note(c(client), "over", 0, TEN_S, 0).write);
    assert!(log.note(Under::Limit(NET), "over", 1, TEN_S, 0).write);
    let other = RefusedBy {
        key: Some(b"203.0.113.0/24"),
        ..NET
    };
    assert!(log.note(Under::Limit(other), "over", 2, TEN_S, 0).write);
    let site = RefusedBy {
        name: "site",
        key: Some(b"site"),
    };
    assert!(log.note(Under::Limit(site), "over", 3, TEN_S, 0).write);
    // a client key spelling a table key of the /24's stays a client
    let mut id = Vec::new();
    Under::Limit(NET).write_id(&mut id);
    assert!(log.note(c(&id), "over", 4, TEN_S, 0).write);
    assert!(log.note(c(&id[1..]), "over", 5, TEN_S, 0).write);
    assert_eq!(log.len(), 6);
    for t in 6..9 {
        assert!(!log.note(Under::Limit(NET), "over", t, TEN_S, 0).write);
    }
    let mut out = Vec::new();
    log.drain(TEN_S, |s| out.push((s.count, s.limit)));
    assert_eq!(out, [(3, Some("limit=net key=198.51.100.0/24".to_owned()))]);
}

#[test]
fn a_full_table_forgets_the_oldest_network_as_it_does_a_client() {
    let mut log = Log::new(2);
    log.note(Under::Limit(NET), "over", 0, TEN_S, 1);
    log.note(Under::Limit(NET), "over", 1, TEN_S, 1);
    log.note(c(b"b"), "over", 2, TEN_S, 2);
    let noted = log.note(c(b"c"), "over", 3, TEN_S, 3);
    let [Some(summary), None] = noted.summaries else {
        panic!("the forgotten /24's count: {:?}", noted.summaries);
    };
    assert_eq!((summary.count, summary.tag), (1, 1));
    assert_eq!(
        summary.limit.as_deref(),
        Some("limit=net key=198.51.100.0/24")
    );
}

/// The payments `under`'s count holds.
fn paid_of(log: &Log, under: Under) -> Option<u64> {
    let mut id = Vec::new();
    under.write_id(&mut id);
    log.clients.get(&id[..]).map(|e| e.paid)
}

#[test]
fn a_payment_is_credited_where_its_challenge_was_counted() {
    let challenge = ("over", Kind::Challenge);
    let client = &b"198.51.100.7"[..];
    let keyed = [(net(), &b"198.51.100.0/24"[..])];
    // (challenges under the client, under its /24, the count credited:
    // the client's own whenever it has one, even owing nothing (its first
    // challenge is written, not counted): a client refused by its own
    // limit does not make its /24's count look paid; else the /24's while
    // it owes one)
    let rows = [
        (3, 3, Some("client")),
        (0, 3, Some("net")),
        (1, 3, Some("client")),
        (1, 1, Some("client")),
        (0, 1, None),
        (0, 0, None),
    ];
    for (own, theirs, credited) in rows {
        let mut log = Log::new(16);
        for t in 0..own {
            log.note_as(c(client), challenge, t, TEN_S, 0);
        }
        for t in 0..theirs {
            log.note_as(Under::Limit(NET), challenge, t, TEN_S, 0);
        }
        log.paid(client, keyed);
        let got = match (paid_of(&log, c(client)), paid_of(&log, Under::Limit(NET))) {
            (Some(1), Some(0) | None) => Some("client"),
            (Some(0) | None, Some(1)) => Some("net"),
            (Some(0) | None, Some(0) | None) => None,
            other => panic!("{other:?}"),
        };
        assert_eq!(got, credited, "{own} {theirs}");
    }
}

#[test]
fn a_network_whose_every_challenge_was_paid_has_no_summary() {
    let mut log = Log::new(16);
    let keyed = [(net(), &b"198.51.100.0/24"[..])];
    for i in 0..50u8 {
        let client = [i];
        log.note_as(Under::Limit(NET), ("over", Kind::Challenge), 0, TEN_S, 0);
        log.paid(&client, keyed);
    }
    let mut out = Vec::new();
    log.due(TEN_S, |s| out.push(s.count));
    assert_eq!(out, Vec::<u64>::new());
}

use super::render::seconds_text;
use super::*;
use crate::decision::Answer;
use crate::limiter::breaker::Block;

fn slot() -> Box<Slot> {
    Box::<Slot>::default()
}

fn end(outcome: Outcome, answer: Option<Answer>, reason: &'static str) -> Final {
    Final {
        outcome,
        answer,
        reason,
        verdict: None,
        breaker: None,
        struck: false,
        retry_after_ms: None,
        generation: None,
        pays_back: false,
        next: None,
    }
}

fn decided(end: Final) -> Decided {
    Decided {
        end,
        trap: false,
        struck: false,
        tripped: None,
        limit: None,
    }
}

fn counted(d: Decided) -> Vec<usize> {
    d.counters().collect()
}

const CHALLENGE: Option<Answer> = Some(Answer::Challenge {
    status: 429,
    error: None,
    bits: 16,
});

#[test]
fn every_outcome_has_its_own_result_label() {
    for outcome in [
        Outcome::Pass,
        Outcome::Challenge,
        Outcome::Solved,
        Outcome::Invalid,
        Outcome::Blocked,
        Outcome::Banned,
        Outcome::Trap,
        Outcome::Exempt,
        Outcome::Unavailable,
    ] {
        assert_eq!(RESULTS[result_index(outcome)], outcome.as_str());
    }
}

#[test]
fn failure_reasons_are_the_rejections_labels_then_spent() {
    use crate::protocol::Rejection::*;
    let labels: Vec<&str> = [
        Malformed,
        BadSignature,
        BadPayload,
        WrongIp,
        WrongClient,
        Expired,
        WrongSolution,
    ]
    .iter()
    .map(|r| r.reason())
    .chain(["spent"])
    .collect();
    assert_eq!(labels, FAILURE_REASONS);
}

#[test]
fn redis_error_kinds_are_in_slot_order() {
    use RedisError::*;
    let kinds = [Io, Timeout, Protocol, Handshake, Reply, Refused];
    for (i, kind) in kinds.iter().enumerate() {
        assert_eq!(*kind as usize, i, "{kind:?} is {}", REDIS_ERROR_KINDS[i]);
    }
}

#[test]
fn a_green_request_counts_one_pass_and_nothing_else() {
    let d = decided(end(Outcome::Pass, None, ""));
    assert_eq!(counted(d), [at::REQUESTS]);
}

#[test]
fn a_429_counts_a_challenge_request_an_issued_challenge_and_its_strike() {
    let mut d = decided(end(Outcome::Challenge, CHALLENGE, "over"));
    d.struck = true;
    assert_eq!(counted(d), [at::REQUESTS + 1, at::CHALLENGES, at::STRIKES]);
}

#[test]
fn a_dry_run_challenge_is_counted_but_no_challenge_was_issued() {
    let d = decided(end(Outcome::Challenge, None, "over"));
    assert_eq!(counted(d), [at::REQUESTS + 1]);
}

#[test]
fn a_failed_verification_counts_its_reason() {
    let d = decided(end(
        Outcome::Invalid,
        Some(Answer::Error {
            status: 403,
            message: "Invalid challenge signature",
        }),
        "signature",
    ));
    assert_eq!(counted(d), [at::REQUESTS + 3, at::FAILED + 1]);
    let spent = decided(end(Outcome::Invalid, CHALLENGE, "spent"));
    assert_eq!(
        counted(spent),
        [at::REQUESTS + 3, at::CHALLENGES, at::FAILED + 7]
    );
}

#[test]
fn a_strike_that_bans_counts_a_trip_and_a_ban() {
    let mut d = decided(end(Outcome::Trap, None, "trap"));
    (d.trap, d.struck, d.tripped) = (true, true, Some(Tripped::Banned));
    assert_eq!(
        counted(d),
        [
            at::REQUESTS + 6,
            at::STRIKES,
            at::TRIPS,
            at::BANS,
            at::TRAP_HITS
        ]
    );
    d.tripped = Some(Tripped::Opened);
    assert_eq!(
        counted(d),
        [at::REQUESTS + 6, at::STRIKES, at::TRIPS, at::TRAP_HITS]
    );
}

#[test]
fn a_blocked_client_on_a_trap_is_a_trap_hit_without_a_strike() {
    let mut d = decided(end(
        Outcome::Blocked,
        Some(Answer::Block(Block::Blocked)),
        "x",
    ));
    d.trap = true;
    assert_eq!(counted(d), [at::REQUESTS + 4, at::TRAP_HITS]);
}

#[test]
fn round_trips_fall_in_the_first_bucket_they_do_not_exceed() {
    assert_eq!(rtt_bucket(0), 0);
    assert_eq!(rtt_bucket(100_000), 0, "le is inclusive");
    assert_eq!(rtt_bucket(100_001), 1);
    assert_eq!(rtt_bucket(999_999), 3);
    assert_eq!(rtt_bucket(1_000_000), 3);
    assert_eq!(rtt_bucket(1_000_000_000), 12);
    assert_eq!(rtt_bucket(1_000_000_001), 13, "+Inf");
    assert_eq!(rtt_bucket(u64::MAX), 13);
}

#[test]
fn bucket_bounds_rise_and_match_their_labels() {
    for w in RTT_BUCKETS.windows(2) {
        assert!(w[0].1 < w[1].1);
    }
    for (le, ns) in RTT_BUCKETS {
        assert_eq!(seconds_text(ns), le);
    }
}

#[test]
fn slots_sum_and_the_fallback_gauge_goes_up_and_down() {
    let (a, b) = (slot(), slot());
    a.count_request(&decided(end(Outcome::Pass, None, "")));
    b.count_request(&decided(end(Outcome::Pass, None, "")));
    a.fallback(true);
    b.fallback(true);
    a.fallback(false);
    let total = Counts::sum([&*a, &*b]);
    assert_eq!(total.get(at::REQUESTS), 2);
    assert_eq!(total.get(at::REDIS_FALLBACK), 1);
    b.fallback(false);
    assert_eq!(Counts::sum([&*a, &*b]).get(at::REDIS_FALLBACK), 0);
}

#[test]
fn a_dead_workers_part_of_the_fallback_gauge_goes_when_a_new_worker_takes_its_slot() {
    let s = slot();
    s.adopt(100, |_| unreachable!("no worker before"));
    s.fallback(true);
    s.adopt(200, |pid| {
        assert_eq!(pid, 100);
        false
    });
    assert_eq!(Counts::sum([&*s]).get(at::REDIS_FALLBACK), 0);
    s.fallback(true);
    assert_eq!(Counts::sum([&*s]).get(at::REDIS_FALLBACK), 1);
}

#[test]
fn a_live_workers_part_of_the_fallback_gauge_stays_until_it_exits() {
    let s = slot();
    s.adopt(100, |_| true);
    s.fallback(true);
    // A reload: the old worker is still finishing its requests.
    s.adopt(200, |_| true);
    assert_eq!(Counts::sum([&*s]).get(at::REDIS_FALLBACK), 1);
    s.fallback(false);
    assert_eq!(Counts::sum([&*s]).get(at::REDIS_FALLBACK), 0);
    s.adopt(200, |_| unreachable!("the same worker again"));
    assert_eq!(
        Counts::sum([&*s]).get(at::OWNER),
        0,
        "the owner is not a count"
    );
}

#[test]
fn seconds_are_printed_exactly() {
    assert_eq!(seconds_text(0), "0");
    assert_eq!(seconds_text(1_500_000_000), "1.5");
    assert_eq!(seconds_text(1_234), "0.000001234");
}

#[test]
fn a_scrape_renders_every_family_with_every_label() {
    let s = slot();
    s.count_request(&Decided {
        end: end(Outcome::Challenge, CHALLENGE, "over"),
        trap: false,
        struck: true,
        tripped: Some(Tripped::Opened),
        limit: None,
    });
    s.add(at::REDIS_COMMANDS, 2);
    s.add(at::REDIS_ERRORS + RedisError::Timeout as usize, 1);
    s.observe_rtt(300_000);
    s.observe_rtt(2_000_000_000);
    s.fallback(true);
    let text = render(&Snapshot {
        counts: Counts::sum([&*s]),
        zone: ZoneStats {
            entries: [3, 1, 2],
            evictions: [4, 0, 0],
            spent_refused: 5,
            buckets_refused: 6,
            size_bytes: 1_048_576,
        },
        version: "1.2.3",
        limit_names: Vec::new(),
    });
    assert_eq!(text, EXPECTED);
}

const EXPECTED: &str = r#"# HELP pow_shield_info The pow-shield module serving these metrics.
# TYPE pow_shield_info gauge
pow_shield_info{version="1.2.3"} 1
# HELP pow_shield_requests_total Shielded requests by decision ($pow_shield_result).
# TYPE pow_shield_requests_total counter
pow_shield_requests_total{result="pass"} 0
pow_shield_requests_total{result="challenge"} 1
pow_shield_requests_total{result="solved"} 0
pow_shield_requests_total{result="invalid"} 0
pow_shield_requests_total{result="blocked"} 0
pow_shield_requests_total{result="banned"} 0
pow_shield_requests_total{result="trap"} 0
pow_shield_requests_total{result="exempt"} 0
pow_shield_requests_total{result="unavailable"} 0
# HELP pow_shield_challenges_issued_total Responses (429, 409, 410, 422) that carried a fresh challenge.
# TYPE pow_shield_challenges_issued_total counter
pow_shield_challenges_issued_total 1
# HELP pow_shield_verifications_failed_total Solutions refused, by the check that failed (docs/protocol.md section 7.2).
# TYPE pow_shield_verifications_failed_total counter
pow_shield_verifications_failed_total{reason="malformed"} 0
pow_shield_verifications_failed_total{reason="signature"} 0
pow_shield_verifications_failed_total{reason="payload"} 0
pow_shield_verifications_failed_total{reason="ip"} 0
pow_shield_verifications_failed_total{reason="binding"} 0
pow_shield_verifications_failed_total{reason="expired"} 0
pow_shield_verifications_failed_total{reason="solution"} 0
pow_shield_verifications_failed_total{reason="spent"} 0
# HELP pow_shield_strikes_total Strikes recorded against clients.
# TYPE pow_shield_strikes_total counter
pow_shield_strikes_total 1
# HELP pow_shield_breaker_trips_total Circuit breakers opened.
# TYPE pow_shield_breaker_trips_total counter
pow_shield_breaker_trips_total 1
# HELP pow_shield_bans_total Clients banned after repeated breaker openings.
# TYPE pow_shield_bans_total counter
pow_shield_bans_total 0
# HELP pow_shield_trap_hits_total Requests to pow_shield_trap locations.
# TYPE pow_shield_trap_hits_total counter
pow_shield_trap_hits_total 0
# HELP pow_shield_redis_commands_total Commands queued for Redis.
# TYPE pow_shield_redis_commands_total counter
pow_shield_redis_commands_total 2
# HELP pow_shield_redis_errors_total Redis failures by kind (refused: too many commands in flight).
# TYPE pow_shield_redis_errors_total counter
pow_shield_redis_errors_total{kind="io"} 0
pow_shield_redis_errors_total{kind="timeout"} 1
pow_shield_redis_errors_total{kind="protocol"} 0
pow_shield_redis_errors_total{kind="handshake"} 0
pow_shield_redis_errors_total{kind="reply"} 0
pow_shield_redis_errors_total{kind="refused"} 0
# HELP pow_shield_redis_reconnects_total Connections to Redis restored after a failure.
# TYPE pow_shield_redis_reconnects_total counter
pow_shield_redis_reconnects_total 0
# HELP pow_shield_redis_replays_dropped_total Tokens spent during an outage that the replay queue had no room for.
# TYPE pow_shield_redis_replays_dropped_total counter
pow_shield_redis_replays_dropped_total 0
# HELP pow_shield_redis_fallback_active Redis connections (one per worker and node) down: their requests are decided by pow_shield_fail.
# TYPE pow_shield_redis_fallback_active gauge
pow_shield_redis_fallback_active 1
# HELP pow_shield_redis_round_trip_seconds Time from queuing a Redis command to reading its reply.
# TYPE pow_shield_redis_round_trip_seconds histogram
pow_shield_redis_round_trip_seconds_bucket{le="0.0001"} 0
pow_shield_redis_round_trip_seconds_bucket{le="0.00025"} 0
pow_shield_redis_round_trip_seconds_bucket{le="0.0005"} 1
pow_shield_redis_round_trip_seconds_bucket{le="0.001"} 1
pow_shield_redis_round_trip_seconds_bucket{le="0.0025"} 1
pow_shield_redis_round_trip_seconds_bucket{le="0.005"} 1
pow_shield_redis_round_trip_seconds_bucket{le="0.01"} 1
pow_shield_redis_round_trip_seconds_bucket{le="0.025"} 1
pow_shield_redis_round_trip_seconds_bucket{le="0.05"} 1
pow_shield_redis_round_trip_seconds_bucket{le="0.1"} 1
pow_shield_redis_round_trip_seconds_bucket{le="0.25"} 1
pow_shield_redis_round_trip_seconds_bucket{le="0.5"} 1
pow_shield_redis_round_trip_seconds_bucket{le="1"} 1
pow_shield_redis_round_trip_seconds_bucket{le="+Inf"} 2
pow_shield_redis_round_trip_seconds_sum 2.0003
pow_shield_redis_round_trip_seconds_count 2
# HELP pow_shield_zone_entries Entries in the shared zone's tables.
# TYPE pow_shield_zone_entries gauge
pow_shield_zone_entries{table="buckets"} 3
pow_shield_zone_entries{table="spent"} 1
pow_shield_zone_entries{table="strikes"} 2
# HELP pow_shield_zone_evictions_total Unexpired entries given up to make room (spent records never are).
# TYPE pow_shield_zone_evictions_total counter
pow_shield_zone_evictions_total{table="buckets"} 4
pow_shield_zone_evictions_total{table="spent"} 0
pow_shield_zone_evictions_total{table="strikes"} 0
# HELP pow_shield_zone_refused_total Records the full zone could not take (spent: a fresh 429; buckets: 503).
# TYPE pow_shield_zone_refused_total counter
pow_shield_zone_refused_total{table="spent"} 5
pow_shield_zone_refused_total{table="buckets"} 6
# HELP pow_shield_zone_size_bytes Size of the shared zone (pow_shield_zone).
# TYPE pow_shield_zone_size_bytes gauge
pow_shield_zone_size_bytes 1048576
"#;

#[test]
fn the_histogram_count_is_its_buckets_sum_so_no_bucket_exceeds_it() {
    // A scrape that reads the slot between an observation's bucket and its
    // sum: the bucket moved, nothing else did.
    let s = slot();
    s.add(at::RTT_BUCKETS + 3, 2);
    s.add(at::RTT_BUCKETS + RTT_BUCKETS.len(), 1);
    let text = render(&Snapshot {
        counts: Counts::sum([&*s]),
        zone: ZoneStats::default(),
        version: "1.2.3",
        limit_names: Vec::new(),
    });
    let value = |sample: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(sample))
            .map(str::trim)
            .map(str::to_owned)
    };
    let name = "pow_shield_redis_round_trip_seconds";
    assert_eq!(
        value(&format!("{name}_bucket{{le=\"1\"}} ")).as_deref(),
        Some("2")
    );
    assert_eq!(
        value(&format!("{name}_bucket{{le=\"+Inf\"}} ")).as_deref(),
        Some("3")
    );
    assert_eq!(value(&format!("{name}_count ")).as_deref(), Some("3"));
}

#[test]
fn a_request_decided_by_a_named_limit_is_counted_by_its_name_only() {
    let s = slot();
    let passed = decided(end(Outcome::Pass, None, "")).by_limit(Some(1));
    s.count_request(&passed);
    s.count_request(&decided(end(Outcome::Challenge, CHALLENGE, "over")).by_limit(Some(0)));
    // not a limit's result: counted as before
    s.count_request(&decided(end(Outcome::Exempt, None, "")).by_limit(Some(0)));
    let text = render(&Snapshot {
        counts: Counts::sum([&*s]),
        zone: ZoneStats::default(),
        version: "1.2.3",
        limit_names: vec!["burst".into(), "hourly".into()],
    });
    for line in [
        "pow_shield_requests_total{result=\"pass\"} 0\n",
        "pow_shield_requests_total{result=\"exempt\"} 1\n",
        "pow_shield_requests_total{result=\"challenge\",limit=\"burst\"} 1\n",
        "pow_shield_requests_total{result=\"pass\",limit=\"hourly\"} 1\n",
        "pow_shield_requests_total{result=\"invalid\",limit=\"hourly\"} 0\n",
    ] {
        assert!(text.contains(line), "{line}");
    }
}

//! The Prometheus text exposition format (0.0.4) of a [`Snapshot`]: every
//! family with `# HELP` and `# TYPE`, every label value printed (zeros too)
//! so that dashboards and alerts see each series from the start.

use core::fmt::Write;

use super::{
    at, Counts, FAILURE_REASONS, LIMIT_NAMES, LIMIT_RESULTS, REDIS_ERROR_KINDS, RESULTS,
    RTT_BUCKETS, TABLES,
};

/// The status location's `Content-Type`.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The zone's own numbers, read under its lock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZoneStats {
    /// Entries in use, by [`TABLES`].
    pub entries: [u64; 3],
    /// Entries given up unexpired to make room, by [`TABLES`].
    pub evictions: [u64; 3],
    pub spent_refused: u64,
    pub buckets_refused: u64,
    pub size_bytes: u64,
}

/// Everything one scrape shows.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub counts: Counts,
    pub zone: ZoneStats,
    pub version: &'static str,
    /// The configuration's limit names, by place (`Decided::limit`,
    /// `LimitPlaces`); empty at a place none of them has.
    pub limit_names: Vec<String>,
}

struct Out(String);

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = write!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
    }

    fn sample(&mut self, name: &str, labels: &str, value: impl core::fmt::Display) {
        if labels.is_empty() {
            let _ = writeln!(self.0, "{name} {value}");
        } else {
            let _ = writeln!(self.0, "{name}{{{labels}}} {value}");
        }
    }

    /// A counter family of one unlabelled sample.
    fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.family(name, "counter", help);
        self.sample(name, "", value);
    }

    /// A family with one label, a sample per value, read from `counts` at
    /// `first`, `first + 1`...
    fn labelled(
        &mut self,
        name: &str,
        label: &str,
        values: &[&str],
        mut get: impl FnMut(usize) -> u64,
    ) {
        for (i, v) in values.iter().enumerate() {
            self.sample(name, &format!("{label}=\"{v}\""), get(i));
        }
    }
}

/// The text of one scrape.
pub fn render(s: &Snapshot) -> String {
    let c = &s.counts;
    let mut o = Out(String::with_capacity(8192));

    o.family(
        "pow_shield_info",
        "gauge",
        "The pow-shield module serving these metrics.",
    );
    o.sample("pow_shield_info", &format!("version=\"{}\"", s.version), 1);

    let name = "pow_shield_requests_total";
    o.family(
        name,
        "counter",
        "Shielded requests by decision ($pow_shield_result).",
    );
    o.labelled(name, "result", &RESULTS, |i| c.get(at::REQUESTS + i));
    // Named or stacked limits: what each limit decided, apart from the
    // above (a request is in one series).
    let named = s.limit_names.iter().enumerate().take(LIMIT_NAMES);
    for (n, limit) in named.filter(|(_, name)| !name.is_empty()) {
        for (i, result) in RESULTS.iter().enumerate().take(LIMIT_RESULTS) {
            o.sample(
                name,
                &format!("result=\"{result}\",limit=\"{limit}\""),
                c.get(at::LIMIT_REQUESTS + n * LIMIT_RESULTS + i),
            );
        }
    }

    o.counter(
        "pow_shield_challenges_issued_total",
        "Responses (429, 409, 410, 422) that carried a fresh challenge.",
        c.get(at::CHALLENGES),
    );

    let name = "pow_shield_verifications_failed_total";
    o.family(
        name,
        "counter",
        "Solutions refused, by the check that failed (docs/protocol.md section 7.2).",
    );
    o.labelled(name, "reason", &FAILURE_REASONS, |i| c.get(at::FAILED + i));

    o.counter(
        "pow_shield_strikes_total",
        "Strikes recorded against clients.",
        c.get(at::STRIKES),
    );
    o.counter(
        "pow_shield_breaker_trips_total",
        "Circuit breakers opened.",
        c.get(at::TRIPS),
    );
    o.counter(
        "pow_shield_bans_total",
        "Clients banned after repeated breaker openings.",
        c.get(at::BANS),
    );
    o.counter(
        "pow_shield_trap_hits_total",
        "Requests to pow_shield_trap locations.",
        c.get(at::TRAP_HITS),
    );
    o.counter(
        "pow_shield_redis_commands_total",
        "Commands queued for Redis.",
        c.get(at::REDIS_COMMANDS),
    );

    let name = "pow_shield_redis_errors_total";
    o.family(
        name,
        "counter",
        "Redis failures by kind (refused: too many commands in flight).",
    );
    o.labelled(name, "kind", &REDIS_ERROR_KINDS, |i| {
        c.get(at::REDIS_ERRORS + i)
    });

    o.counter(
        "pow_shield_redis_reconnects_total",
        "Connections to Redis restored after a failure.",
        c.get(at::REDIS_RECONNECTS),
    );
    o.counter(
        "pow_shield_redis_replays_dropped_total",
        "Tokens spent during an outage that the replay queue had no room for.",
        c.get(at::REDIS_REPLAYS_DROPPED),
    );

    let name = "pow_shield_redis_fallback_active";
    o.family(
        name,
        "gauge",
        "Redis connections (one per worker and node) down: their requests are decided by pow_shield_fail.",
    );
    // Wrapping sum of +1/-1: a negative total is a worker gone while in
    // fallback that another one left; never shown below 0.
    o.sample(name, "", (c.get(at::REDIS_FALLBACK) as i64).max(0));

    let name = "pow_shield_redis_round_trip_seconds";
    o.family(
        name,
        "histogram",
        "Time from queuing a Redis command to reading its reply.",
    );
    let mut cumulative = 0u64;
    for (i, (le, _)) in RTT_BUCKETS.iter().enumerate() {
        cumulative = cumulative.wrapping_add(c.get(at::RTT_BUCKETS + i));
        o.sample(
            &format!("{name}_bucket"),
            &format!("le=\"{le}\""),
            cumulative,
        );
    }
    // The count is the buckets' sum, never a separate counter: a scrape
    // racing an observation still reads `le="1"` <= `+Inf` = `_count`.
    let count = cumulative.wrapping_add(c.get(at::RTT_BUCKETS + RTT_BUCKETS.len()));
    o.sample(&format!("{name}_bucket"), "le=\"+Inf\"", count);
    o.sample(&format!("{name}_sum"), "", seconds(c.get(at::RTT_SUM_NS)));
    o.sample(&format!("{name}_count"), "", count);

    let z = &s.zone;
    let name = "pow_shield_zone_entries";
    o.family(name, "gauge", "Entries in the shared zone's tables.");
    o.labelled(name, "table", &TABLES, |i| z.entries[i]);

    let name = "pow_shield_zone_evictions_total";
    o.family(
        name,
        "counter",
        "Unexpired entries given up to make room (spent records never are).",
    );
    o.labelled(name, "table", &TABLES, |i| z.evictions[i]);

    let name = "pow_shield_zone_refused_total";
    o.family(
        name,
        "counter",
        "Records the full zone could not take (spent: a fresh 429; buckets: 503).",
    );
    o.labelled(name, "table", &["spent", "buckets"], |i| {
        [z.spent_refused, z.buckets_refused][i]
    });

    let name = "pow_shield_zone_size_bytes";
    o.family(name, "gauge", "Size of the shared zone (pow_shield_zone).");
    o.sample(name, "", z.size_bytes);

    o.0
}

/// Nanoseconds as seconds, in the shortest decimal that reads back exactly.
fn seconds(ns: u64) -> String {
    let whole = ns / 1_000_000_000;
    let frac = ns % 1_000_000_000;
    if frac == 0 {
        return whole.to_string();
    }
    let digits = format!("{frac:09}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
pub(super) fn seconds_text(ns: u64) -> String {
    seconds(ns)
}

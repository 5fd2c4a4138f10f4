//! Bookkeeping of the client that decides what is logged and refused (pure,
//! unit-tested): whether Redis is available and when to retry, and what
//! the node's workers share of it (`NodeHealth`), error replies by kind,
//! the cap on commands in flight.

/// Reconnect back-off: first retry, and the ceiling it doubles up to (so a
/// restarted Redis is used again within a couple of seconds).
pub const BACKOFF_FIRST_MS: u64 = 100;
pub const BACKOFF_MAX_MS: u64 = 2_000;
/// How long Redis must stay available after a recovery before the next
/// outage starts the back-off again from `BACKOFF_FIRST_MS`: a Redis that
/// flaps (answers some commands in time, not others) is retried ever less
/// often instead of every 100 ms.
pub const SETTLE_MS: u64 = 30_000;
/// How long after Redis came back an unpaid refusal is no strike
/// ([`Availability::strikes_unpaid`]): the other nodes, each retrying on
/// its own back-off (at most `BACKOFF_MAX_MS` apart, and a handshake),
/// come back meanwhile and write the payments they took while standing
/// in, which take back the strikes of this node's challenges. A client
/// paying through several nodes is not blocked in between (SPEC §5).
pub const RECOVERY_GRACE_MS: u64 = BACKOFF_MAX_MS + 1_000;

/// Whether Redis is available, and how long to wait before the next
/// attempt while it isn't. Transitions are reported once each.
///
/// A new connection after an outage is on probation: requests may use it,
/// but Redis is available again (logged, back in the gauge) only once a
/// command's reply arrived within its request deadline. A Redis a little
/// slower than `timeout=` answers the handshake (which has the connect
/// deadline too) but never a request in time: it stays unavailable, logged
/// once, with the back-off growing.
pub struct Availability {
    phase: Phase,
    backoff_ms: u64,
    /// When the last outage ended (nginx's millisecond clock).
    recovered_at_ms: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Healthy,
    /// Connected after an outage; no reply in time yet.
    Probation,
    Down,
}

/// What a failure means for the log.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// Redis was available: log the outage once.
    Started,
    /// Still down (a retry failed, or a connection on probation): debug only.
    Continues,
}

impl Default for Availability {
    fn default() -> Self {
        Availability {
            phase: Phase::Healthy,
            backoff_ms: BACKOFF_FIRST_MS,
            recovered_at_ms: None,
        }
    }
}

impl Availability {
    /// Redis is available (not down, not on probation).
    pub fn is_healthy(&self) -> bool {
        self.phase == Phase::Healthy
    }

    /// Commands may be sent: available, or a connection on probation.
    pub fn admits(&self) -> bool {
        self.phase != Phase::Down
    }

    /// The connection failed at `now_ms`: returns what to log and how long
    /// to wait before reconnecting. The wait doubles while failures
    /// continue, and also across a recovery shorter than `SETTLE_MS`.
    pub fn failed(&mut self, now_ms: u64) -> (Failure, u64) {
        let was = core::mem::replace(&mut self.phase, Phase::Down);
        let settled = self
            .recovered_at_ms
            .is_none_or(|at| now_ms.saturating_sub(at) >= SETTLE_MS);
        if was == Phase::Healthy && settled {
            self.backoff_ms = BACKOFF_FIRST_MS;
        } else {
            self.backoff_ms = (self.backoff_ms * 2).min(BACKOFF_MAX_MS);
        }
        let failure = match was {
            Phase::Healthy => Failure::Started,
            Phase::Probation | Phase::Down => Failure::Continues,
        };
        (failure, self.backoff_ms)
    }

    /// A connection's handshake succeeded: true if it follows an outage
    /// (the connection is on probation: send a probe).
    pub fn connected(&mut self) -> bool {
        if self.phase == Phase::Down {
            self.phase = Phase::Probation;
            return true;
        }
        false
    }

    /// A command's reply arrived before its deadline: true if this ends an
    /// outage (log it once).
    pub fn answered_in_time(&mut self, now_ms: u64) -> bool {
        if self.phase != Phase::Probation {
            return false;
        }
        self.phase = Phase::Healthy;
        self.recovered_at_ms = Some(now_ms);
        true
    }
}

impl Availability {
    /// Whether an unpaid refusal counts a strike at `now_ms`: not while
    /// the node stands in for Redis or a connection is on probation (what
    /// it decides then, Redis would not confirm), nor within
    /// `RECOVERY_GRACE_MS` of this worker's or its node's (`node_back_ms`)
    /// return. Failed verifications, replays and trap hits always strike.
    #[inline]
    pub fn strikes_unpaid(&self, now_ms: u64, node_back_ms: Option<u64>) -> bool {
        let ends = |back: Option<u64>| back.map_or(0, |at| at.saturating_add(RECOVERY_GRACE_MS));
        self.phase == Phase::Healthy && now_ms >= ends(self.recovered_at_ms).max(ends(node_back_ms))
    }

    /// Another worker of the node found Redis back: this one returns at
    /// once, on probation (its requests go to Redis; the first reply in
    /// time ends its outage), instead of waiting out its back-off.
    pub fn rejoin(&mut self) {
        if self.phase == Phase::Down {
            self.phase = Phase::Probation;
        }
    }

    /// What this worker does about the node's word on Redis (`node`), of
    /// which it last saw epoch `seen`: a change it has not seen yet is
    /// followed (every worker of a node stands in while one found Redis
    /// down, and all return when one finds it back).
    pub fn follow(&self, node: NodeHealth, seen: u64) -> Follow {
        if node.epoch() == seen {
            return Follow::Stay;
        }
        match (node.is_down(), self.phase) {
            (true, Phase::Healthy | Phase::Probation) => Follow::StandIn,
            (false, Phase::Down) => Follow::Return,
            _ => Follow::Stay,
        }
    }
}

/// Redis's health as the workers of one node share it (one word per
/// Redis in the zone: `epoch << 1 | down`). The worker that first finds
/// Redis down, or back, flips it and starts a new epoch; the others follow
/// each epoch once ([`Availability::follow`]). Zero: up, never changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeHealth(u64);

/// What a worker does about a change of the node's word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    /// Nothing new, or the worker agrees already.
    Stay,
    /// Another worker found Redis down: this one fails its connection too
    /// (its requests are decided by `pow_shield_fail`) and retries with
    /// back-off.
    StandIn,
    /// Another worker found Redis back: this one returns at once
    /// ([`Availability::rejoin`]).
    Return,
}

impl NodeHealth {
    pub fn from_word(word: u64) -> Self {
        NodeHealth(word)
    }

    pub fn word(self) -> u64 {
        self.0
    }

    pub fn is_down(self) -> bool {
        self.0 & 1 == 1
    }

    /// Which change this is (each flip, one more).
    pub fn epoch(self) -> u64 {
        self.0 >> 1
    }

    /// The word once a worker found Redis down (its connection failed
    /// while it was available); `None`: down already.
    pub fn found_down(self) -> Option<NodeHealth> {
        (!self.is_down()).then(|| self.flipped())
    }

    /// The word once a worker found Redis back (a reply in time after an
    /// outage); `None`: up already.
    pub fn found_up(self) -> Option<NodeHealth> {
        self.is_down().then(|| self.flipped())
    }

    fn flipped(self) -> NodeHealth {
        let epoch = self.epoch().wrapping_add(1) & (u64::MAX >> 1);
        NodeHealth(epoch << 1 | u64::from(!self.is_down()))
    }
}

/// Error replies logged once per kind: the first reply of a kind logs an
/// error line; a success after a quiet period logs one notice. Replies of
/// other requests succeeding meanwhile (one client's key has the wrong type,
/// the others are fine) don't end the episode, so the log doesn't flap.
#[derive(Default)]
pub struct ErrorReplies {
    /// The kinds logged in this episode (at most `MAX_KINDS`).
    kinds: Vec<String>,
    last_error_ms: u64,
}

/// How long without an error reply before a success ends the episode.
pub const ERROR_QUIET_MS: u64 = 30_000;
/// Kinds remembered per episode; more are not logged (a peer inventing
/// kinds must not flood the log or grow memory).
const MAX_KINDS: usize = 8;

impl ErrorReplies {
    /// An error reply of `kind`: true if it is to be logged.
    pub fn on_error(&mut self, kind: &str, now_ms: u64) -> bool {
        self.last_error_ms = now_ms;
        if self.kinds.len() >= MAX_KINDS || self.kinds.iter().any(|k| k == kind) {
            return false;
        }
        self.kinds.push(kind.to_owned());
        true
    }

    /// A successful reply: true if it ends an episode (log a notice).
    pub fn on_success(&mut self, now_ms: u64) -> bool {
        if self.kinds.is_empty() || now_ms.saturating_sub(self.last_error_ms) < ERROR_QUIET_MS {
            return false;
        }
        self.kinds.clear();
        true
    }
}

/// Commands in flight on one connection, capped: beyond the cap a request
/// is decided by `pow_shield_fail` at once instead of queueing behind a
/// Redis that doesn't keep up (it would wait for the timeout anyway).
pub struct InFlight {
    cap: usize,
    now: usize,
    over: bool,
    refused: u64,
}

/// What `InFlight::admit` says.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    Admitted,
    /// Refused; `first` when this starts an episode (log it once).
    Refused {
        first: bool,
    },
}

impl InFlight {
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            now: 0,
            over: false,
            refused: 0,
        }
    }

    /// One more command, if under the cap.
    pub fn admit(&mut self) -> Admission {
        self.admit_together(1)
    }

    /// `n` commands that go together (ASKING and its command), all or none.
    pub fn admit_together(&mut self, n: usize) -> Admission {
        if self.now + n <= self.cap {
            self.now += n;
            return Admission::Admitted;
        }
        self.refused += 1;
        let first = !self.over;
        self.over = true;
        Admission::Refused { first }
    }

    /// `n` commands were answered or failed; true if this ends an episode
    /// of refusals (back to half the cap, so the log doesn't flap at it).
    pub fn done(&mut self, n: usize) -> bool {
        self.now = self.now.saturating_sub(n);
        if self.over && self.now <= self.cap / 2 {
            self.over = false;
            return true;
        }
        false
    }

    /// Commands refused for the cap since the worker started.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.now
    }
}

/// The message of an nginx error-log line (time, level, pid and
/// connection number dropped), for quoting OpenSSL's reason in ours.
pub fn log_message(line: &str) -> &str {
    let line = line.trim_end();
    let Some(after_pid) = line
        .find('#')
        .and_then(|at| line[at..].find(": ").map(|colon| at + colon + 2))
    else {
        return line;
    };
    let message = &line[after_pid..];
    match message.strip_prefix('*').and_then(|m| m.split_once(' ')) {
        Some((n, rest)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => rest,
        _ => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_line_is_quoted_without_its_prefix() {
        assert_eq!(
            log_message("2026/12/01 04:16:54 [info] 1234#1234: *5 SSL_read() failed (SSL: x)\n"),
            "SSL_read() failed (SSL: x)"
        );
        assert_eq!(
            log_message("2026/12/01 04:16:54 [crit] 7#7: send() failed"),
            "send() failed"
        );
        assert_eq!(log_message("no prefix"), "no prefix");
    }

    /// Down, then connected and answered in time at `at`.
    fn recover(a: &mut Availability, at: u64) -> bool {
        assert!(
            a.connected(),
            "a connection after an outage is on probation"
        );
        a.answered_in_time(at)
    }

    #[test]
    fn an_outage_is_reported_once_and_retries_back_off_up_to_the_ceiling() {
        let mut a = Availability::default();
        assert!(a.is_healthy());
        assert_eq!(a.failed(0), (Failure::Started, 100));
        assert!(!a.is_healthy() && !a.admits());
        let waits: Vec<u64> = (0..6).map(|_| a.failed(0).1).collect();
        assert_eq!(waits, [200, 400, 800, 1600, 2000, 2000]);
        assert!(a.failed(0).0 == Failure::Continues);
    }

    #[test]
    fn a_handshake_alone_does_not_end_an_outage() {
        let mut a = Availability::default();
        assert!(!a.connected(), "never down: no probation");
        a.failed(0);
        assert!(a.connected());
        assert!(
            a.admits() && !a.is_healthy(),
            "on probation: commands go, still down"
        );
        assert!(!a.connected(), "one probation per outage");
        assert_eq!(
            a.failed(10),
            (Failure::Continues, 200),
            "a request timing out on probation continues the outage"
        );
    }

    #[test]
    fn recovery_is_reported_once_after_a_reply_in_time() {
        let mut a = Availability::default();
        assert!(!a.answered_in_time(0), "never down: nothing to report");
        a.failed(0);
        a.failed(0);
        assert!(!a.answered_in_time(5), "no connection yet");
        assert!(recover(&mut a, 5));
        assert!(a.is_healthy());
        assert!(!a.answered_in_time(6));
    }

    #[test]
    fn a_redis_slower_than_the_timeout_stays_down_with_the_back_off_growing() {
        let mut a = Availability::default();
        assert_eq!(a.failed(0).0, Failure::Started);
        // Each retry: the handshake succeeds, the first request times out.
        let waits: Vec<(Failure, u64)> = (1..=5)
            .map(|i| {
                a.connected();
                a.failed(i * 1000)
            })
            .collect();
        assert!(waits.iter().all(|(f, _)| *f == Failure::Continues));
        let waits: Vec<u64> = waits.into_iter().map(|(_, w)| w).collect();
        assert_eq!(waits, [200, 400, 800, 1600, 2000]);
    }

    #[test]
    fn the_back_off_keeps_growing_while_redis_flaps_and_restarts_once_settled() {
        let mut a = Availability::default();
        assert_eq!(a.failed(0), (Failure::Started, 100));
        assert!(recover(&mut a, 100));
        assert_eq!(a.failed(200), (Failure::Started, 200), "a flap");
        assert!(recover(&mut a, 400));
        assert_eq!(a.failed(500), (Failure::Started, 400));
        assert!(recover(&mut a, 1_000));
        assert_eq!(
            a.failed(1_000 + SETTLE_MS),
            (Failure::Started, 100),
            "available for SETTLE_MS: a new outage starts afresh"
        );
    }

    #[test]
    fn one_worker_flips_the_nodes_word_and_each_flip_is_a_new_epoch() {
        let up = NodeHealth::default();
        assert!(!up.is_down() && up.epoch() == 0);
        let down = up.found_down().unwrap();
        assert!(down.is_down() && down.epoch() == 1);
        assert_eq!(down.found_down(), None, "down already");
        let back = down.found_up().unwrap();
        assert!(!back.is_down() && back.epoch() == 2);
        assert_eq!(back.found_up(), None, "up already");
        assert_eq!(NodeHealth::from_word(back.word()), back);
    }

    #[test]
    fn every_worker_of_a_node_follows_each_change_once() {
        let (up, down) = (Phase::Healthy, Phase::Down);
        let probation = Phase::Probation;
        let word =
            |epoch: u64, is_down: bool| NodeHealth::from_word(epoch << 1 | u64::from(is_down));
        // (this worker, the node's word, the epoch it saw last) → what it does
        #[rustfmt::skip]
        let table = [
            // Another worker found Redis down: every worker stands in.
            (up, word(1, true), 0, Follow::StandIn),
            (probation, word(3, true), 2, Follow::StandIn),
            // Down already, or seen already (it stood in, and came back
            // on its own since: its own word decides until the next flip).
            (down, word(1, true), 0, Follow::Stay),
            (up, word(1, true), 1, Follow::Stay),
            // Another worker found Redis back: every worker returns now.
            (down, word(2, false), 1, Follow::Return),
            (down, word(2, false), 0, Follow::Return),
            (up, word(2, false), 1, Follow::Stay),
            (probation, word(2, false), 1, Follow::Stay),
            (down, word(2, false), 2, Follow::Stay),
            // A worker started after a reload, the zone's word down.
            (up, word(5, true), 0, Follow::StandIn),
        ];
        for (i, (phase, node, seen, want)) in table.into_iter().enumerate() {
            let a = Availability {
                phase,
                ..Availability::default()
            };
            assert_eq!(a.follow(node, seen), want, "row {i}");
        }
    }

    #[test]
    fn an_unpaid_refusal_strikes_only_once_every_node_had_time_to_return() {
        let g = RECOVERY_GRACE_MS;
        let healthy = Availability::default();
        let mut down = Availability::default();
        down.failed(1_000);
        let mut probation = Availability::default();
        probation.failed(1_000);
        probation.connected();
        let mut back = Availability::default();
        back.failed(1_000);
        recover(&mut back, 5_000);
        // (this worker, now, when its node came back) → strikes unpaid
        #[rustfmt::skip]
        let table = [
            (&healthy, 9_000, None, true),
            (&down, 3_000, None, false),
            (&probation, 3_000, None, false),
            // Back at 5 000: its challenges strike nothing until 5 000 + g.
            (&back, 5_000, None, false),
            (&back, 5_000 + g - 1, None, false),
            (&back, 5_000 + g, None, true),
            // A worker idle through the outage: its node's return counts.
            (&healthy, 6_000, Some(5_000), false),
            (&healthy, 5_000 + g, Some(5_000), true),
            (&back, 5_000 + g, Some(6_000), false),
            // The node came back before this worker: the later return counts.
            (&back, 5_000 + g - 1, Some(1_000), false),
            (&back, 5_000 + g, Some(1_000), true),
            // A return ahead of now (another worker's clock): no strike yet.
            (&healthy, 6_000, Some(9_000), false),
        ];
        for (i, (a, now, node_back, want)) in table.into_iter().enumerate() {
            assert_eq!(a.strikes_unpaid(now, node_back), want, "row {i}");
        }
    }

    /// One worker as the module's connection drives it (`exchange.rs`):
    /// its own availability, the node's word, the epoch it last saw.
    struct Worker {
        a: Availability,
        seen: u64,
    }

    impl Worker {
        fn new() -> Self {
            Worker {
                a: Availability::default(),
                seen: 0,
            }
        }

        /// A request: follows the node's word first.
        fn request(&mut self, node: &mut NodeHealth, now: u64) {
            match self.a.follow(*node, self.seen) {
                Follow::StandIn => self.fail(node, now),
                Follow::Return => self.a.rejoin(),
                Follow::Stay => {}
            }
            self.seen = node.epoch();
        }

        fn fail(&mut self, node: &mut NodeHealth, now: u64) {
            if self.a.failed(now).0 == Failure::Started {
                *node = node.found_down().unwrap_or(*node);
            }
            self.seen = node.epoch();
        }

        /// Reconnected, and a reply came in time: true if it found Redis
        /// back first (the node's `back`).
        fn answered(&mut self, node: &mut NodeHealth, now: u64) -> bool {
            self.a.connected();
            let first = self.a.answered_in_time(now) && node.is_down();
            if first {
                *node = node.found_up().unwrap_or(*node);
            }
            self.seen = node.epoch();
            first
        }
    }

    /// Issue 37's stall on the model: two nodes of two workers, Redis
    /// stopped at 1 000 for 2 500 ms, `timeout=300ms`.
    #[test]
    fn a_stall_replayed_a_nodes_workers_stand_in_and_return_together() {
        let g = RECOVERY_GRACE_MS;
        let mut nodes = [NodeHealth::default(); 2];
        let mut workers = [
            [Worker::new(), Worker::new()],
            [Worker::new(), Worker::new()],
        ];
        // 1 300: the first worker of each node times out.
        for (node, w) in nodes.iter_mut().zip(&mut workers) {
            w[0].fail(node, 1_300);
            assert!(node.is_down());
        }
        // The other stands in at its next request (its connection was fine).
        for (node, w) in nodes.iter_mut().zip(&mut workers) {
            w[1].request(node, 1_310);
            assert!(!w[1].a.admits(), "stands in");
            assert!(!w[1].a.strikes_unpaid(1_310, None));
        }
        // 3 500: SIGCONT. Node 0's second worker reconnects first (3 600);
        // its first returns at its next request, not at its back-off.
        let mut back = [None, None];
        assert!(workers[0][1].answered(&mut nodes[0], 3_600));
        back[0] = Some(3_600);
        workers[0][0].request(&mut nodes[0], 3_601);
        assert!(workers[0][0].a.admits(), "returns with its node");
        assert!(
            !workers[0][0].answered(&mut nodes[0], 3_602),
            "logged once per node"
        );
        // Node 1 comes back later, at its own back-off (5 200).
        assert!(nodes[1].is_down());
        assert!(workers[1][0].answered(&mut nodes[1], 5_200));
        back[1] = Some(5_200);
        workers[1][1].request(&mut nodes[1], 5_201);
        assert!(workers[1][1].a.admits());
        assert!(!workers[1][1].answered(&mut nodes[1], 5_202));
        // No worker of node 0 strikes an unpaid 429 before node 1 had its
        // time to return and write its payments; then all do.
        for (n, w) in workers.iter().enumerate() {
            for w in w {
                assert!(!w.a.strikes_unpaid(5_200, back[n]), "node {n}");
                assert!(
                    w.a.strikes_unpaid(back[n].unwrap() + g + 2, back[n]),
                    "node {n}"
                );
            }
        }
    }

    #[test]
    fn a_worker_that_returns_is_on_probation_until_a_reply_in_time() {
        let mut a = Availability::default();
        a.failed(0);
        a.rejoin();
        assert!(a.admits() && !a.is_healthy());
        assert!(!a.connected(), "its handshake needs no probe: requests go");
        assert!(a.answered_in_time(5), "logged once as back");
        a.rejoin();
        assert!(a.is_healthy(), "only a worker that is down rejoins");
    }

    #[test]
    fn the_first_error_of_a_kind_is_logged_and_repeats_are_not() {
        let mut e = ErrorReplies::default();
        assert!(e.on_error("WRONGTYPE", 0));
        assert!(!e.on_error("WRONGTYPE", 1));
        assert!(e.on_error("READONLY", 2));
        assert!(!e.on_error("READONLY", 3));
    }

    #[test]
    fn successes_between_errors_do_not_end_the_episode() {
        let mut e = ErrorReplies::default();
        assert!(e.on_error("WRONGTYPE", 0));
        assert!(!e.on_success(1));
        assert!(!e.on_error("WRONGTYPE", 2));
        assert!(!e.on_success(3));
    }

    #[test]
    fn a_success_after_a_quiet_period_ends_the_episode_once() {
        let mut e = ErrorReplies::default();
        assert!(!e.on_success(0), "no episode, no notice");
        e.on_error("OOM", 0);
        assert!(e.on_success(ERROR_QUIET_MS));
        assert!(!e.on_success(ERROR_QUIET_MS + 1));
        assert!(e.on_error("OOM", ERROR_QUIET_MS + 2), "a new episode");
    }

    #[test]
    fn only_a_few_kinds_are_remembered() {
        let mut e = ErrorReplies::default();
        let logged = (0..100).filter(|i| e.on_error(&format!("K{i}"), 0)).count();
        assert_eq!(logged, MAX_KINDS);
    }

    #[test]
    fn commands_beyond_the_cap_are_refused_and_counted() {
        let mut f = InFlight::new(2);
        assert_eq!(f.admit(), Admission::Admitted);
        assert_eq!(f.admit(), Admission::Admitted);
        assert_eq!(f.admit(), Admission::Refused { first: true });
        assert_eq!(f.admit(), Admission::Refused { first: false });
        assert_eq!(f.refused(), 2);
        assert_eq!(f.len(), 2);
    }

    #[test]
    fn commands_that_go_together_are_admitted_all_or_none() {
        let mut f = InFlight::new(3);
        assert_eq!(f.admit_together(2), Admission::Admitted);
        assert_eq!(f.admit_together(2), Admission::Refused { first: true });
        assert_eq!(f.len(), 2, "neither of the refused pair counts");
        assert_eq!(
            f.admit(),
            Admission::Admitted,
            "the last place is still free"
        );
    }

    #[test]
    fn an_episode_ends_once_back_at_half_the_cap() {
        let mut f = InFlight::new(4);
        (0..4).for_each(|_| assert_eq!(f.admit(), Admission::Admitted));
        assert_eq!(f.admit(), Admission::Refused { first: true });
        assert!(!f.done(1), "3 in flight: still over");
        assert_eq!(f.admit(), Admission::Admitted);
        assert_eq!(f.admit(), Admission::Refused { first: false });
        assert!(f.done(2));
        assert!(!f.done(2));
        assert_eq!(f.len(), 0);
    }
}

//! The cluster node driven through sequences (a burst, a flood, a stall
//! and its recovery, a lift), its calls run by a real `redis-server`
//! (`scripts::tests::redis_server`), its zone a model of the module's
//! (the same `LocalRefusal` and `StrikeCounter` the zone's entries hold).

mod gather;
mod keyed;
mod sequences;
mod spend;
mod stacks;

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use redis_protocol::resp2::types::OwnedFrame;

use super::*;
use crate::cluster::keys::{self, ClientKey};
use crate::cluster::scripts::tests::redis_server::Redis;
use crate::limiter::breaker::{Block, StrikeCounter, StrikeRule};
use crate::limiter::{Limits, RateLimit};
use crate::redis::cluster::ClientSlot;
use crate::store::{KeyValues, Offence, Solution, CLIENT_KEYS};

pub(super) const LIMIT: RateLimit = RateLimit {
    requests: 2,
    window_ms: 60_000,
};

/// [`LIMIT`] alone, as a location holds it.
pub(super) static ONE_LIMIT: Limits = Limits::one(LIMIT);

pub(super) const RULES: BreakerRules = BreakerRules {
    strikes: Some(StrikeRule {
        threshold: 10,
        ttl_ms: 600_000,
    }),
    ban: None,
};

pub(super) const UNPAID: Op = Op::Check {
    offence: Offence::Unpaid,
};

/// A request: its number, and whether it still waits.
#[derive(Clone, Debug)]
pub(super) struct Req(pub u32, Rc<Cell<bool>>);

impl Waits for Req {
    fn waiting(&self) -> bool {
        self.1.get()
    }
}

/// The node's zone, as the module keeps it (`store/redis/node_cache.rs`).
pub(super) struct Zone {
    pub reach: Reach,
    pub refusals: HashMap<Vec<u8>, crate::cluster::refusals::LocalRefusal>,
    pub breakers: HashMap<Vec<u8>, StrikeCounter>,
    pub spent: HashMap<[u8; 32], u64>,
}

impl Around for Zone {
    fn reach(&self, _route: &[u8], _slot: Option<u16>) -> Reach {
        self.reach
    }

    fn healthy(&self) -> bool {
        self.reach != Reach::Down
    }

    fn has_zone(&self) -> bool {
        true
    }

    fn blocked(&mut self, key: &[u8], rules: BreakerRules, now_ms: u64) -> Option<BreakerStatus> {
        let breaker = self.breakers.get_mut(key)?.confirmed(rules, now_ms);
        (breaker.block != Block::Clear).then_some(breaker)
    }

    fn remember(&mut self, key: &[u8], breaker: BreakerStatus, rules: BreakerRules, now_ms: u64) {
        if breaker.block != Block::Clear && breaker.block_ms > 0 {
            let counter = self.breakers.entry(key.to_vec()).or_default();
            counter.remember(breaker, rules, now_ms);
        }
    }

    fn refuse(
        &mut self,
        refusal: &[u8],
        rules: BreakerRules,
        now_ms: u64,
        stale_ok: bool,
        rising: bool,
    ) -> Option<Refused> {
        let redis_up = self.healthy();
        self.refusals
            .get_mut(refusal)?
            .refuse(rules, now_ms, (stale_ok, redis_up), rising)
    }

    fn holds(&mut self, refusal: &[u8], now_ms: u64) -> bool {
        self.refusals.get(refusal).is_some_and(|r| r.holds(now_ms))
    }

    fn take_pending(&mut self, refusal: &[u8]) -> u32 {
        self.refusals
            .get_mut(refusal)
            .map_or(0, |r| r.take_pending())
    }

    fn learn_refusal(
        &mut self,
        refusal: &[u8],
        verdict: &Verdict,
        breaker: &BreakerStatus,
        at: u64,
    ) {
        let entry = self.refusals.entry(refusal.to_vec()).or_default();
        if entry.learn(verdict, breaker, at).is_none() {
            entry.release(at);
        }
    }

    fn refusals_sent(&mut self, refusal: &[u8], (sent, over, strikes): (u32, u32, u32), now: u64) {
        if let Some(r) = self.refusals.get_mut(refusal) {
            r.acknowledged(sent, over, strikes, now);
        }
    }

    fn forget_refusal(&mut self, refusal: &[u8], now_ms: u64) {
        if let Some(r) = self.refusals.get_mut(refusal) {
            match r.disposable() {
                true => drop(self.refusals.remove(refusal)),
                false => r.release(now_ms),
            }
        }
    }

    fn refusal_forgiven(&mut self, refusal: &[u8], strikes: u32) {
        if let Some(r) = self.refusals.get_mut(refusal) {
            r.forgiven(strikes);
        }
    }

    fn forget_refusals(&mut self, now_ms: u64) {
        self.refusals.retain(|_, r| {
            r.release(now_ms);
            !r.disposable()
        });
    }

    fn record_spent(&mut self, digest: &[u8; 32], until: u64, now: u64) -> Result<bool, NoRoom> {
        if self.is_spent(digest, now) {
            return Ok(false);
        }
        self.spent.insert(*digest, until);
        Ok(true)
    }

    fn is_spent(&mut self, digest: &[u8; 32], now_ms: u64) -> bool {
        self.spent.get(digest).is_some_and(|until| *until > now_ms)
    }

    fn forgive(&mut self, key: &[u8], rules: BreakerRules, now_ms: u64) {
        if let Some(counter) = self.breakers.get_mut(key) {
            counter.forgive(rules, now_ms);
        }
    }
}

/// What became of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Fate {
    Answered(Reply),
    FellBack { failure: Unavailable, sent: bool },
}

/// A request whose call got no reply (the router's timeout: Redis may
/// have run it).
pub(super) const TIMED_OUT: Fate = Fate::FellBack {
    failure: Unavailable::Down,
    sent: true,
};

/// A request that fell back, Redis down, its check never sent.
pub(super) const NEVER_SENT: Fate = Fate::FellBack {
    failure: Unavailable::Down,
    sent: false,
};

/// One worker's node, its zone, the calls it sent that Redis has not run
/// yet, and what became of each request.
pub(super) struct Rig {
    pub node: ClusterNode<Req>,
    pub zone: Zone,
    pub redis: Redis,
    pub prefix: String,
    pub now: Now,
    /// Sent, not yet run by Redis (a stalled Redis holds them).
    pub held: VecDeque<(CallId, Command)>,
    /// Calls sent with the slot of their route (checked: the router's).
    pub sent_in_slot: usize,
    pub fates: HashMap<u32, Fate>,
    pub timers: u32,
    pub alerts: Vec<Alert>,
    /// Script calls Redis ran, of every kind.
    pub calls_run: u32,
    next_req: u32,
    alive: HashMap<u32, Rc<Cell<bool>>>,
}

impl Rig {
    /// A node on one Redis with keys under a prefix of the test's own;
    /// `None` without a redis-server (`POW_SHIELD_SKIP_REDIS=1`).
    pub fn new(test: &str) -> Option<Rig> {
        Rig::of(test, false)
    }

    /// A node of a Redis Cluster (its scripts run on the one test Redis:
    /// every key is in its slot there).
    pub fn cluster(test: &str) -> Option<Rig> {
        Rig::of(test, true)
    }

    /// [`Rig::cluster`] with a client's keys in its network's slot
    /// (`slot=net`).
    pub fn cluster_net(test: &str) -> Option<Rig> {
        Rig::with_calls(test, |prefix| {
            Calls::new(prefix, 7, 1, true).with_client_slot(ClientSlot::Net)
        })
    }

    fn of(test: &str, cluster: bool) -> Option<Rig> {
        Rig::with_calls(test, |prefix| Calls::new(prefix, 7, 1, cluster))
    }

    fn with_calls(test: &str, calls: impl FnOnce(&str) -> Calls) -> Option<Rig> {
        let redis = Redis::connect(test)?;
        let prefix = format!("node-test:{test}:{}:", std::process::id());
        let calls = calls(&prefix);
        let mut rig = Rig {
            node: ClusterNode::new(calls, 1, 99, 7),
            zone: Zone {
                reach: Reach::Connected,
                refusals: HashMap::new(),
                breakers: HashMap::new(),
                spent: HashMap::new(),
            },
            redis,
            prefix,
            now: Now {
                monotonic_ms: 1_000_000,
                epoch_ms: 1_765_000_000_000,
            },
            held: VecDeque::new(),
            sent_in_slot: 0,
            fates: HashMap::new(),
            timers: 0,
            alerts: Vec::new(),
            calls_run: 0,
            next_req: 0,
            alive: HashMap::new(),
        };
        let mut out = Vec::new();
        rig.node.connected(&mut rig.zone, rig.now, &mut out);
        rig.carry(out);
        rig.run_all();
        Some(rig)
    }

    /// Time passes.
    pub fn after(&mut self, ms: u64) -> &mut Self {
        self.now.monotonic_ms += ms;
        self.now.epoch_ms += ms;
        self
    }

    /// Asks `op` for client `key` under `limits`; the request's number and
    /// what it got at once.
    pub fn ask(&mut self, op: Op, key: &[u8], limits: Limits, fail: FailPolicy) -> (u32, Answered) {
        self.ask_keyed(op, (key, CLIENT_KEYS), limits, fail)
    }

    /// As `ask`, with each limit's `key=` value.
    pub fn ask_keyed(
        &mut self,
        op: Op,
        (key, key_values): (&[u8], KeyValues),
        limits: Limits,
        fail: FailPolicy,
    ) -> (u32, Answered) {
        let limits = Box::leak(Box::new(limits));
        let subject = Subject {
            limits,
            key_values,
            ..Rig::subject_of(key)
        };
        self.ask_subject(op, subject, fail)
    }

    /// An unpaid client `key` under the one limit.
    pub fn subject_of(key: &[u8]) -> Subject<'_> {
        Subject {
            key,
            limits: &ONE_LIMIT,
            key_values: CLIENT_KEYS,
            rules: RULES,
            rising: false,
        }
    }

    /// Asks `op` for `subject`.
    pub fn ask_subject(&mut self, op: Op, subject: Subject, fail: FailPolicy) -> (u32, Answered) {
        self.next_req += 1;
        let n = self.next_req;
        let mut out = Vec::new();
        let alive = Rc::new(Cell::new(true));
        self.alive.insert(n, alive.clone());
        let waiter = || Req(n, alive);
        let answered = self.node.ask(
            &mut self.zone,
            (op, &subject, fail),
            self.now,
            waiter,
            &mut out,
        );
        if let Answered::Now(reply) = &answered {
            self.fates.insert(n, Fate::Answered(*reply));
        }
        self.carry(out);
        (n, answered)
    }

    /// An unpaid request of `key` under the one limit.
    pub fn unpaid(&mut self, key: &[u8]) -> (u32, Answered) {
        self.ask(UNPAID, key, Limits::one(LIMIT), FailPolicy::Local)
    }

    /// A spend of `digest` by `key`.
    pub fn spend(&mut self, key: &[u8], digest: [u8; 32]) -> (u32, Answered) {
        let solution = self.solution(digest);
        self.ask(
            Op::Spend(solution),
            key,
            Limits::one(LIMIT),
            FailPolicy::Local,
        )
    }

    pub fn solution(&self, digest: [u8; 32]) -> Solution {
        Solution {
            digest,
            spent_until_ms: self.now.epoch_ms + 60_000,
            generation: None,
            // Its 429 struck (the token's `st`).
            forgive: true,
            retry_at_ms: None,
        }
    }

    /// Carries out steps as the module does: a send is held for Redis.
    pub fn carry(&mut self, steps: Vec<Step<Req>>) {
        for step in steps {
            match step {
                Step::Deliver(req, reply) => {
                    self.fates.insert(req.0, Fate::Answered(reply));
                }
                Step::FallBack {
                    waiter,
                    failure,
                    sent,
                } => {
                    self.fates
                        .insert(waiter.0, Fate::FellBack { failure, sent });
                }
                Step::Send {
                    id,
                    route,
                    slot,
                    command,
                } => {
                    // A Redis Cluster's call sent without its route
                    // carries its slot (the router's contract: it would
                    // route an empty key to slot 0).
                    assert!(
                        !route.is_empty() || slot.is_some() || !self.node.cluster,
                        "a Redis Cluster's call without a route carries its slot"
                    );
                    // A slot the call knew is the one the router would
                    // compute from its route (none copied: from the
                    // call's first key, which Redis checks).
                    let routed = match route.is_empty() {
                        false => crate::redis::cluster::route_slot(&route),
                        true => first_key_slot(&command),
                    };
                    // Every key of a Redis Cluster's call in that slot
                    // (Redis refuses others: CROSSSLOT).
                    if self.node.cluster && !route.is_empty() {
                        for key in call_keys(&command) {
                            let slot = crate::redis::cluster::key_slot(key.as_bytes());
                            assert_eq!(slot, routed, "{key} beside route {route:?}");
                        }
                    }
                    assert!(slot.is_none_or(|slot| slot == routed), "{slot:?}");
                    self.sent_in_slot += usize::from(slot.is_some());
                    self.held.push_back((id, command));
                }
                Step::Timer { .. } => self.timers += 1,
                Step::Alert(alert) => self.alerts.push(alert),
            }
        }
    }

    /// Redis runs the oldest held call and the node gets its reply.
    pub fn run_one(&mut self) -> Option<OwnedFrame> {
        let (id, command) = self.held.pop_front()?;
        let frame = self.execute(&command);
        self.reply(id, Some(&frame));
        Some(frame)
    }

    /// Redis runs every held call, and those their replies lead to.
    pub fn run_all(&mut self) {
        while self.run_one().is_some() {}
    }

    /// The node gets `frame` (none: a timeout) for call `id`.
    pub fn reply(&mut self, id: CallId, frame: Option<&OwnedFrame>) {
        let mut out = Vec::new();
        // (As the pipeline reads it: a script's integers inline.)
        let frame = frame.cloned().map(crate::redis::command::Frame::from);
        self.node
            .on_reply(&mut self.zone, id, frame.as_ref(), self.now, &mut out);
        self.carry(out);
    }

    /// The first call sent gets no reply (the router's timeout: Redis may
    /// have run it); its command.
    pub fn time_out_first(&mut self) -> Command {
        let Some((id, command)) = self.held.pop_front() else {
            panic!("no call");
        };
        self.reply(id, None);
        command
    }

    /// Redis runs script call `call` as if it came `ago_ms` after its
    /// deadline (a stalled Redis running what the node gave up on).
    pub fn run_late(&mut self, call: &Call, ago_ms: u64) -> OwnedFrame {
        let mut late = call.evalsha.clone();
        let past = self.redis.now_ms() - ago_ms;
        assert!(crate::redis::clock::stamp(&mut late, past));
        self.redis.raw(&late)
    }

    /// Redis runs `command` (loading its script if it lost it).
    pub fn execute(&mut self, command: &Command) -> OwnedFrame {
        match command {
            Command::Plain(bytes) => self.redis.raw(bytes),
            Command::Script(call) => {
                self.calls_run += 1;
                match self.redis.raw(&call.evalsha) {
                    OwnedFrame::Error(e) if e.starts_with("NOSCRIPT") => {
                        self.redis.raw(&call.eval())
                    }
                    frame => frame,
                }
            }
        }
    }

    /// The batch timer runs.
    pub fn tick(&mut self, exiting: bool) {
        let mut out = Vec::new();
        self.node.tick(&mut self.zone, self.now, exiting, &mut out);
        self.carry(out);
    }

    /// Request `n` goes away (its client closed the connection).
    pub fn gone(&mut self, n: u32) {
        if let Some(alive) = self.alive.get(&n) {
            alive.set(false);
        }
    }

    /// What request `n` got.
    pub fn fate(&self, n: u32) -> Option<&Fate> {
        self.fates.get(&n)
    }

    /// Whether request `n` was answered with a check that admitted it.
    pub fn admitted(&self, n: u32) -> bool {
        matches!(self.fate(n), Some(Fate::Answered(Reply::Checked(c))) if c.verdict.allowed)
    }

    /// Whether request `n` was answered with a refusal (not a block).
    pub fn refused(&self, n: u32) -> bool {
        matches!(self.fate(n), Some(Fate::Answered(Reply::Checked(c)))
            if !c.verdict.allowed && c.breaker.block == Block::Clear)
    }

    /// An integer key of client `key` in Redis (0 if missing).
    pub fn redis_int(&mut self, key: &[u8], which: ClientKey) -> i64 {
        let mut name = Vec::new();
        let tag = self.node.calls().tag(key);
        keys::write(&mut name, self.prefix.as_bytes(), &tag, which);
        match self.redis.call(&[b"GET", &name]) {
            OwnedFrame::BulkString(v) => String::from_utf8_lossy(&v).parse().unwrap_or(-1),
            _ => 0,
        }
    }

    /// How many requests the client's window holds in Redis.
    pub fn window(&mut self, key: &[u8]) -> i64 {
        let mut name = Vec::new();
        let tag = self.node.calls().tag(key);
        keys::write(
            &mut name,
            self.prefix.as_bytes(),
            tag.as_bytes(),
            ClientKey::Window(LIMIT),
        );
        match self.redis.call(&[b"ZCARD", &name]) {
            OwnedFrame::Integer(n) => n,
            _ => -1,
        }
    }
}

/// The keys of a script call (`EVALSHA <sha> <numkeys> <key>...`; none of
/// another command).
fn call_keys(command: &Command) -> Vec<String> {
    let Command::Script(call) = command else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&call.evalsha).into_owned();
    let words: Vec<&str> = text.split("\r\n").collect();
    let n: usize = words.get(6).and_then(|n| n.parse().ok()).unwrap_or(0);
    (0..n)
        .filter_map(|i| words.get(8 + 2 * i).map(|k| k.to_string()))
        .collect()
}

/// The slot of a script call's first key (`EVALSHA <sha> <numkeys> <key>
/// ...`), as Redis routes it.
fn first_key_slot(command: &Command) -> u16 {
    let Command::Script(call) = command else {
        panic!("a call without a route is a script's");
    };
    let text = String::from_utf8_lossy(&call.evalsha).into_owned();
    // `*<n>`, then `$<len>` and the word: EVALSHA, the SHA, numkeys, a key.
    let key = text.split("\r\n").nth(8).expect("a key");
    crate::redis::cluster::key_slot(key.as_bytes())
}

#[test]
fn a_calls_first_key_gives_its_slot() {
    let mut call = crate::redis::script_call::ScriptCall::new(&"0".repeat(40), 1, 0);
    call.push(|w| w.extend_from_slice(b"pow:{abc}:w:1:2"));
    let call = crate::cluster::calls::Call::of_text("", call);
    let slot = crate::redis::cluster::key_slot(b"abc");
    assert_eq!(first_key_slot(&Command::Script(call)), slot);
}

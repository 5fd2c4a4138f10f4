//! The runner of the script-vs-model tables: one client's requests, at
//! the times a table says, asked of the Lua scripts on the test run's Redis
//! and of the Rust model of the same rules (`store::run` over a
//! `MemoryStore`: `limiter::{window, breaker}`, stacked limits, spends;
//! for `approx`, the counter as `Scripts::approx` documents it), each
//! answer compared. Each table runs twice: on one Redis's scripts, then
//! on a Redis Cluster's, called as the node calls them (`cluster`).
//!
//! Redis's clock cannot be set, so the tables run on real time: a table
//! starts on a slot boundary of the model's ring (its rows' times are
//! offsets from there), the model is asked at the `TIME` Redis answered
//! just before the script ran, and times (`Reset`, `Retry-After`, block
//! ms) are compared within a slot width plus the call's duration (the
//! ring's error bound, `limiter::window`).

use std::time::Duration;

mod cluster;

use super::redis_server::Redis;
use crate::cluster::scripts::args::{offence, rules as rule_args, spend_mode};
use crate::cluster::scripts::replies::{
    batch_text, batches_from_reply, checked_from_reply, coalesced_from_reply, spent_from_reply,
    stacked_checked_from_reply, struck_from_reply,
};
use crate::cluster::scripts::Scripts;
use crate::limiter::breaker::{Block, BreakerRules, BreakerStatus, Tripped};
use crate::limiter::{Limits, RateLimit, Verdict};
use crate::store::take_back::{strike_back, Case};
use crate::store::{Checked, MemoryStore, Offence, Op, Reply, Solution, Subject};
use crate::store::{Spent, Struck};

const KEY: &[u8] = b"client";

/// One row's request.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// A check; a refusal is this offence.
    Check(Offence),
    /// `k` checks of the client at once (a coalesced burst, `ARGV[9]`).
    Coalesced(u32),
    Strike,
    /// The spend of solution `n`, whose 429 counted a strike if `forgive`,
    /// before that 429's `Retry-After` ended.
    Spend(u8, bool),
    /// The spend of solution `n`, whose 429 counted a strike, after that
    /// 429's `Retry-After` ended (a wait may have taken the strike back).
    SpendWaitedOut(u8),
    /// `n` refusals the node counted locally, in one batch (the model: `n`
    /// refused 429s checked one by one).
    Batch(u32),
}

/// What a table expects of a row.
#[derive(Clone, Copy, Debug)]
pub enum Expect {
    Same,
    /// The scripts and the model legitimately differ here, for this reason.
    Differs(&'static str),
}

#[derive(Clone, Copy, Debug)]
pub struct Row {
    /// ms from the table's start.
    pub at: u64,
    pub step: Step,
    pub expect: Expect,
}

pub const fn same(at: u64, step: Step) -> Row {
    Row {
        at,
        step,
        expect: Expect::Same,
    }
}

/// One table: a location's limits and rules, and a client's requests.
pub struct Table<'a> {
    pub name: &'static str,
    pub limits: &'a [RateLimit],
    pub approx: bool,
    pub rules: BreakerRules,
    pub rows: &'a [Row],
}

/// What either side answered, field by field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub allowed: bool,
    pub remaining: u32,
    pub over: u32,
    pub limit: u8,
    pub strikes: u32,
    pub block: Block,
    pub tripped: Option<Tripped>,
    pub struck: bool,
    /// Spends: 1 accepted, 2 replayed, 3 blocked.
    pub spent: u8,
    /// Reset, Retry-After and block ms: compared within the tolerance.
    pub times: [u64; 3],
}

impl Outcome {
    fn agrees(&self, other: &Outcome, tolerance: u64) -> bool {
        let near = self
            .times
            .iter()
            .zip(other.times)
            .all(|(a, b)| a.abs_diff(b) <= tolerance);
        near && Outcome {
            times: [0; 3],
            ..*self
        } == Outcome {
            times: [0; 3],
            ..*other
        }
    }

    fn checked(c: &Checked) -> Outcome {
        Outcome {
            allowed: c.verdict.allowed,
            remaining: c.verdict.remaining,
            over: c.verdict.over,
            limit: c.verdict.limit,
            strikes: c.breaker.strikes,
            block: c.breaker.block,
            tripped: c.breaker.tripped,
            struck: c.struck,
            times: [
                c.verdict.reset_after_ms,
                c.verdict.retry_after_ms,
                c.breaker.block_ms,
            ],
            ..Outcome::default()
        }
    }

    /// A strike's answer, as the scripts' and the model's read alike.
    fn struck(s: &Struck) -> Outcome {
        Outcome {
            struck: s.struck,
            ..Outcome::checked(&Checked {
                breaker: s.breaker,
                ..Checked::default()
            })
        }
    }

    /// A batch's answer: what it found over, and the breaker after it.
    fn batched(over: u32, b: BreakerStatus, tripped: Option<Tripped>) -> Outcome {
        Outcome {
            over,
            strikes: b.strikes,
            block: b.block,
            tripped,
            times: [0, 0, b.block_ms],
            ..Outcome::default()
        }
    }

    fn spent(s: Spent) -> Outcome {
        let (spent, b) = match s {
            Spent::Accepted(b) => (1, b),
            Spent::Replayed => (2, Default::default()),
            Spent::Blocked(b) => (3, b),
            other => panic!("{other:?}"),
        };
        Outcome {
            spent,
            strikes: b.strikes,
            block: b.block,
            times: [0, 0, b.block_ms],
            ..Outcome::default()
        }
    }
}

/// The counter `Scripts::approx` documents, in Rust: fixed windows, the
/// previous one's requests taken as evenly spread (f64, as Lua's numbers).
#[derive(Default)]
struct Counter {
    index: u64,
    curr: f64,
    prev: f64,
    over: u32,
    /// The refusals key's expiry: two windows after the first refusal.
    over_until: u64,
}

impl Counter {
    /// `paid`: the request carries a solution (its limit's refusals are
    /// then reported when admitted, as where no request is left).
    fn admit(&mut self, limit: RateLimit, now: u64, paid: bool) -> Verdict {
        let (window, cap) = (limit.window_ms as f64, f64::from(limit.requests));
        let index = now / limit.window_ms;
        if index != self.index {
            self.prev = if index == self.index + 1 {
                self.curr
            } else {
                0.0
            };
            (self.index, self.curr) = (index, 0.0);
        }
        if now >= self.over_until {
            self.over = 0;
        }
        let left = window - (now - index * limit.window_ms) as f64;
        let mut estimate = self.prev * left / window + self.curr;
        let allowed = estimate < cap;
        let mut retry = 0.0;
        if allowed {
            self.curr += 1.0;
            estimate += 1.0;
        } else {
            if self.over == 0 {
                self.over_until = now + 2 * limit.window_ms;
            }
            self.over += 1;
            retry = if self.curr < cap {
                (left - (cap - self.curr) * window / self.prev).floor() + 1.0
            } else {
                left + (window - cap * window / self.curr).floor() + 1.0
            };
            retry = retry.max(1.0).min(left + window);
        }
        let reset = match (self.curr > 0.0, self.prev > 0.0) {
            (true, _) => left + window,
            (false, true) => left,
            _ => 0.0,
        };
        let remaining = (cap - estimate.ceil()).max(0.0) as u32;
        Verdict {
            allowed,
            remaining,
            reset_after_ms: reset as u64,
            retry_after_ms: retry as u64,
            over: if !allowed || remaining == 0 || paid {
                self.over
            } else {
                0
            },
            limit: 0,
        }
    }
}

struct Bench<'t> {
    table: &'t Table<'t>,
    redis: Redis,
    model: MemoryStore,
    counter: Counter,
    prefix: String,
    limits: &'static Limits,
    seq: u64,
    batched: u32,
    /// A Redis Cluster's calls, for the run on its scripts (`cluster`);
    /// `None`: the one-Redis scripts, called by hand.
    cluster: Option<crate::cluster::calls::Calls>,
}

impl Bench<'_> {
    fn key(&self, what: &str) -> String {
        format!("{}:{what}", self.prefix)
    }

    fn subject(&self) -> Subject<'static> {
        Subject {
            key: KEY,
            limits: self.limits,
            key_values: crate::store::CLIENT_KEYS,
            rules: self.table.rules,
            rising: false,
        }
    }

    fn breaker_keys(&self) -> Vec<String> {
        ["s", "t", "u"].map(|k| self.key(k)).to_vec()
    }

    fn rules(&self) -> Vec<String> {
        rule_args(self.table.rules).map(|n| n.to_string()).to_vec()
    }

    /// The scripts' answers to one row.
    fn lua(&mut self, step: Step) -> Vec<Outcome> {
        let scripts = Scripts::for_mode(false);
        let rules = self.table.rules;
        self.seq += 1;
        let member = format!("m{}", self.seq);
        if let (Step::Check(o), [_, _, ..]) = (step, self.limits.as_slice()) {
            let mut keys = self.breaker_keys();
            let mut args = vec![member, offence(o).to_string()];
            args.extend(self.rules());
            let approx = if self.table.approx { "1" } else { "0" };
            args.push(approx.repeat(self.limits.len()));
            args.push("1".repeat(self.limits.len()));
            for (i, limit) in self.limits.as_slice().iter().enumerate() {
                keys.extend([self.key(&format!("w:{i}")), self.key(&format!("o:{i}"))]);
                let limit = limit.rate;
                args.extend([limit.requests.to_string(), limit.window_ms.to_string()]);
            }
            let reply = self.redis.ints(&scripts.stacked, &keys, &args);
            let checked = stacked_checked_from_reply(&reply, self.limits, o, rules, false);
            return vec![Outcome::checked(&checked.unwrap())];
        }
        let limit = self.limits.first().unwrap_or(RateLimit {
            requests: 1,
            window_ms: 1,
        });
        match step {
            Step::Check(_) | Step::Coalesced(_) => {
                let (o, k) = match step {
                    Step::Check(o) => (o, 1),
                    Step::Coalesced(k) => (Offence::Unpaid, k),
                    _ => unreachable!(),
                };
                let mut keys = vec![self.key("w:0"), self.key("o:0")];
                keys.extend(self.breaker_keys());
                let mut args = vec![limit.requests.to_string(), limit.window_ms.to_string()];
                args.extend([member, offence(o).to_string()]);
                args.extend(self.rules());
                args.push(k.to_string());
                let script = scripts.check(self.table.approx);
                let reply = self.redis.ints(script, &keys, &args);
                if k == 1 {
                    return vec![Outcome::checked(
                        &checked_from_reply(&reply, limit, false).unwrap(),
                    )];
                }
                let c = coalesced_from_reply(&reply, limit, k).unwrap();
                (0..k)
                    .map(|i| Outcome::checked(&c.nth(i, k, rules)))
                    .collect()
            }
            Step::Strike => {
                let reply = self
                    .redis
                    .ints(&scripts.strike, &self.breaker_keys(), &self.rules());
                vec![Outcome::struck(&struck_from_reply(&reply, rules).unwrap())]
            }
            Step::Spend(_, _) | Step::SpendWaitedOut(_) => {
                let (n, forgive, waited_out) = match step {
                    Step::Spend(n, forgive) => (n, forgive, false),
                    Step::SpendWaitedOut(n) => (n, true, true),
                    _ => unreachable!(),
                };
                let mut keys = vec![self.key(&format!("p:{n}"))];
                keys.extend(self.breaker_keys());
                keys.extend([self.key("c"), self.key("c")]);
                let mut args = vec!["60000".to_owned()];
                args.extend(self.rules());
                let paid = Case::Paid {
                    struck: forgive,
                    waited_out,
                };
                args.push(spend_mode(false, strike_back(paid)).to_string());
                let reply = self.redis.ints(&scripts.spend, &keys, &args);
                vec![Outcome::spent(spent_from_reply(&reply).unwrap())]
            }
            Step::Batch(n) => {
                self.batched += n;
                let mut keys = vec![self.key("o:0")];
                keys.extend(self.breaker_keys());
                keys.extend([self.key("n:1"), self.key("c")]);
                let mut args = vec![self.batched.to_string(), limit.window_ms.to_string()];
                args.extend(self.rules());
                args.extend(["1".to_owned(), "0".to_owned()]);
                let text = match self.redis.eval(&scripts.batch, &keys, &args) {
                    redis_protocol::resp2::types::OwnedFrame::BulkString(t) => t,
                    other => panic!("batch: {other:?}"),
                };
                let ints = batch_text(&text).unwrap();
                let (over, b) = batches_from_reply(&ints, 1).unwrap()[0];
                vec![Outcome::batched(over, b, b.tripped)]
            }
        }
    }

    /// The model's answers to one row, at `now`.
    fn model(&mut self, step: Step, now: u64) -> Vec<Outcome> {
        let subject = self.subject();
        let model = self.model.at(now);
        let ask = |model: &mut MemoryStore, op| model.ask(op, &subject);
        if let (Step::Check(offence), true) = (step, self.table.approx) {
            let limit = self.limits.first().unwrap();
            let verdict = self.counter.admit(limit, now, offence == Offence::None);
            return vec![Outcome::checked(&Checked {
                verdict,
                ..Checked::default()
            })];
        }
        match step {
            Step::Check(offence) => match ask(model, Op::Check { offence }) {
                Reply::Checked(c) => vec![Outcome::checked(&c)],
                other => panic!("{other:?}"),
            },
            Step::Coalesced(k) => (0..k)
                .map(|_| {
                    match ask(
                        model,
                        Op::Check {
                            offence: Offence::Unpaid,
                        },
                    ) {
                        Reply::Checked(c) => Outcome::checked(&c),
                        other => panic!("{other:?}"),
                    }
                })
                .collect(),
            Step::Strike => match ask(model, Op::Strike) {
                Reply::Struck(s) => vec![Outcome::struck(&s)],
                other => panic!("{other:?}"),
            },
            Step::Spend(n, _) | Step::SpendWaitedOut(n) => {
                let forgive = !matches!(step, Step::Spend(_, false));
                let solution = Solution {
                    digest: [n; 32],
                    spent_until_ms: now + 60_000,
                    generation: None,
                    forgive,
                    retry_at_ms: None,
                };
                match ask(model, Op::Spend(solution)) {
                    Reply::Spent(s) => vec![Outcome::spent(s)],
                    other => panic!("{other:?}"),
                }
            }
            Step::Batch(n) => {
                let (mut over, mut tripped) = (0, None);
                for _ in 0..n {
                    if let Reply::Checked(c) = ask(
                        model,
                        Op::Check {
                            offence: Offence::Unpaid,
                        },
                    ) {
                        over = over.max(c.verdict.over);
                        tripped = tripped.or(c.breaker.tripped);
                    }
                }
                let rules = self.table.rules;
                let b = model
                    .breakers
                    .get_mut(KEY)
                    .map(|s| s.status(rules, now))
                    .unwrap_or_default();
                vec![Outcome::batched(over, b, tripped)]
            }
        }
    }
}

/// The slot width of the model's ring for `limit` (`limiter::window`).
fn width(limit: RateLimit) -> u64 {
    limit
        .window_ms
        .div_ceil(crate::limiter::window::SLOTS as u64 - 1)
}

/// Runs `table`; a row that disagrees fails it, unless the machine was so
/// slow that one call took longer than the tolerance (then it runs once
/// more). `None`: skipped (no Redis, and the skip asked for).
pub fn run(table: &Table) {
    for cluster in [false, true] {
        for attempt in 0..2 {
            match run_once(table, attempt, cluster) {
                Ok(()) => break,
                Err(why) if attempt == 0 && why.starts_with("slow") => eprintln!("{why}: again"),
                Err(why) => panic!(
                    "{} (a Redis Cluster's scripts: {cluster}): {why}",
                    table.name
                ),
            }
        }
    }
}

fn run_once(table: &Table, attempt: u32, cluster: bool) -> Result<(), String> {
    let Some(mut redis) = Redis::connect(table.name) else {
        return Ok(());
    };
    let mut limits = Limits::default();
    for limit in table.limits {
        let limit = crate::limiter::Limit::new(*limit);
        let limit = if table.approx { limit.approx() } else { limit };
        limits.add(limit).unwrap();
    }
    // Every limit's ring (and the approximate counter's fixed windows)
    // starts a slot at the table's start.
    let align = table
        .limits
        .iter()
        .map(|l| if table.approx { l.window_ms } else { width(*l) })
        .fold(1, lcm);
    let slack = table.limits.iter().map(|l| width(*l)).max().unwrap_or(0);
    if cluster {
        cluster::load(&mut redis);
    }
    let start = (redis.now_ms() / align + 1) * align + 10;
    let mut bench = Bench {
        table,
        redis,
        model: MemoryStore::default(),
        counter: Counter::default(),
        prefix: format!("t:{}:{attempt}:{cluster}:{}", table.name, start),
        limits: Box::leak(Box::new(limits)),
        seq: 0,
        batched: 0,
        cluster: None,
    };
    if cluster {
        bench.cluster = Some(cluster::calls(&bench.prefix));
    }
    for (i, row) in table.rows.iter().enumerate() {
        loop {
            let now = bench.redis.now_ms();
            if now >= start + row.at {
                break;
            }
            std::thread::sleep(Duration::from_millis(start + row.at - now));
        }
        let t0 = bench.redis.now_ms();
        let lua = match bench.cluster.take() {
            Some(calls) => {
                let lua = bench.cluster_lua(&calls, row.step, t0);
                bench.cluster = Some(calls);
                lua
            }
            None => bench.lua(row.step),
        };
        let took = bench.redis.now_ms() - t0;
        let model = bench.model(row.step, t0);
        let tolerance = slack + took + 5;
        if t0 - start - row.at > 40 || took > 40 {
            return Err(format!("slow: row {i} ran {} ms late", t0 - start - row.at));
        }
        let agree =
            lua.len() == model.len() && lua.iter().zip(&model).all(|(a, b)| a.agrees(b, tolerance));
        match (row.expect, agree) {
            (Expect::Same, true) => {}
            (Expect::Same, false) => {
                return Err(format!(
                    "row {i} ({row:?}): the scripts and the model differ (times within \
                     {tolerance} ms)\n  lua:   {lua:?}\n  model: {model:?}"
                ))
            }
            (Expect::Differs(_), true) => {
                return Err(format!(
                    "row {i} ({row:?}) was to differ, but agrees: {lua:?}"
                ))
            }
            (Expect::Differs(why), false) => {
                eprintln!("{} row {i}: differs as expected ({why})", table.name)
            }
        }
    }
    Ok(())
}

fn lcm(a: u64, b: u64) -> u64 {
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    a / gcd(a, b) * b
}

//! The cluster node (docs/operations.md, "What is decided where"): what a
//! worker decides on its own side of Redis, as values. No I/O, no nginx,
//! time passed in: given an operation for a subject it answers from the
//! node, joins a call on its way, or says which call to send; given a
//! reply (or none: a timeout, a call the router refused) or a tick, it
//! says what to deliver and what to send next ([`Step`]). The module's
//! `store/redis` only carries these steps to the router and back.
//!
//! It holds what this worker knows: the calls on their way and what each
//! reply decides ([`Flight`]), the groups of requests that joined a
//! client's check (`check.rs`), the refusals counted here and their
//! batches (`batches.rs`), the spends to write to Redis after an outage
//! and the data generations (`spend.rs`). What the node's workers share
//! (blocks Redis reported, refusals until `T`, spent tokens) lives in the
//! zone, reached through [`Around`].

mod batches;
mod check;
mod flights;
mod gather;
mod ids;
mod in_turn;
mod keyed;
mod look;
mod sharded;
mod spare;
mod spend;
mod stacks;
mod zone_keys;

use ids::Ids;
pub use look::{BlockOf, Held, Look, Looked};

use std::collections::HashMap;

use crate::redis::command::Frame;

use crate::cluster::calls::{Call, Calls};
use crate::cluster::fallback::{Reach, Unavailable};
use crate::cluster::refusals::{refusal_key, Batches, RefusalKey, Refused};
use crate::cluster::replays::Replays;
use crate::cluster::tracker::Tracker;
use crate::limiter::breaker::{BreakerRules, BreakerStatus};
use crate::limiter::{RateLimit, Verdict};
use crate::store::{Checked, NoRoom, Now, Op, Reply, Subject};
use crate::syntax::FailPolicy;

use batches::BatchContext;
use check::Group;
pub use in_turn::in_turn;
pub use spend::MAX_REPLAYS;
pub use zone_keys::RefusalKeys;

/// A request waiting for the node's answer (the module's: its resume
/// event). The node only moves it around, and asks whether it still waits:
/// a request gone meanwhile is neither counted nor struck.
pub trait Waits {
    fn waiting(&self) -> bool;
}

/// What surrounds a worker's node: what it knows of Redis now (from its
/// connections) and what the node's workers share in the zone. Without a
/// zone (nginx could not map it) nothing is kept: reads find nothing.
pub trait Around {
    /// What the connection that commands routed by `route` (in `slot`,
    /// where known: not hashed again) take knows of Redis now.
    fn reach(&self, route: &[u8], slot: Option<u16>) -> Reach;
    /// Whether a command may be sent now (to some node).
    fn healthy(&self) -> bool;
    /// Whether the node has a zone.
    fn has_zone(&self) -> bool;
    /// The client's block Redis reported, while it holds.
    fn blocked(&mut self, key: &[u8], rules: BreakerRules, now_ms: u64) -> Option<BreakerStatus>;
    /// Keeps a block Redis reported for as long as it lasts.
    fn remember(&mut self, key: &[u8], breaker: BreakerStatus, rules: BreakerRules, now_ms: u64);
    /// One more local refusal of `refusal` (`LocalRefusal::refuse`, while
    /// Redis takes commands: [`Around::healthy`], asked only of a refusal
    /// the node holds).
    fn refuse(
        &mut self,
        refusal: &[u8],
        rules: BreakerRules,
        now_ms: u64,
        stale_ok: bool,
        rising: bool,
    ) -> Option<Refused>;
    /// Whether the node holds a refusal of `refusal` until a `T` still
    /// ahead (whether or not it may answer with it now).
    fn holds(&mut self, refusal: &[u8], now_ms: u64) -> bool;
    /// The refusals of `refusal` no worker took yet.
    fn take_pending(&mut self, refusal: &[u8]) -> u32;
    /// What the node holds of a request's limits before it asks Redis,
    /// looked at as one (a zone: under one lock, each refusal's key made
    /// once). First the block of `block`'s client, while it holds
    /// ([`Around::blocked`]): that answers ([`Looked::Blocked`]), nothing
    /// else is looked at. With `refuse` (an unpaid request the node may answer), each
    /// of `looks` in turn until one answers: held before it is refused
    /// here ([`Held`]), [`Around::refuse`], held after; the first that
    /// answers, by its place. Then, unless one was refused here, the
    /// refusals of each no worker took yet ([`Around::take_pending`]), by
    /// place into `pending` (as long as `looks`).
    fn look(
        &mut self,
        looks: &[Look],
        (now_ms, rising): (u64, bool),
        (refuse, block): (bool, BlockOf),
        pending: &mut [u32],
    ) -> Option<(usize, Looked)> {
        if let Some((key, rules)) = block {
            if let Some(breaker) = self.blocked(key, rules, now_ms) {
                return Some((0, Looked::Blocked(breaker)));
            }
        }
        let mut one = |look: &Look| {
            if look.held.before && self.holds(look.refusal, now_ms) {
                return Some(Looked::Held);
            }
            let (rules, stale_ok) = (*look.rules, look.stale_ok);
            if let Some(refused) = self.refuse(look.refusal, rules, now_ms, stale_ok, rising) {
                return Some(Looked::Refused(refused));
            }
            (look.held.after && self.holds(look.refusal, now_ms)).then_some(Looked::Held)
        };
        let answered = match refuse {
            true => looks
                .iter()
                .enumerate()
                .find_map(|(at, look)| Some((at, one(look)?))),
            false => None,
        };
        if let Some((_, Looked::Refused(_))) = answered {
            return answered;
        }
        for (look, n) in looks.iter().zip(pending) {
            *n = self.take_pending(look.refusal);
        }
        answered
    }
    /// Keeps Redis's refusal of a check sent at `asked_ms` until its `T`.
    fn learn_refusal(
        &mut self,
        refusal: &[u8],
        verdict: &Verdict,
        breaker: &BreakerStatus,
        asked_ms: u64,
    );
    /// Redis took `sent` of the refusals and counts `over` and `strikes`.
    fn refusals_sent(&mut self, refusal: &[u8], counts: (u32, u32, u32), now_ms: u64);
    /// Stops refusing `refusal` here (Redis decides the next request).
    fn forget_refusal(&mut self, refusal: &[u8], now_ms: u64);
    /// A spend took one strike back: Redis counts `strikes`.
    fn refusal_forgiven(&mut self, refusal: &[u8], strikes: u32);
    /// Forgets every refusal (Redis may have lost what it said).
    fn forget_refusals(&mut self, now_ms: u64);
    /// Records a token Redis spent (`Ok(false)`: held already).
    fn record_spent(
        &mut self,
        digest: &[u8; 32],
        until_ms: u64,
        now_ms: u64,
    ) -> Result<bool, NoRoom>;
    /// Whether the token is spent here, unexpired at `now_ms` (epoch).
    fn is_spent(&mut self, digest: &[u8; 32], now_ms: u64) -> bool;
    /// Takes back one unpaid strike of `key` the zone holds.
    fn forgive(&mut self, key: &[u8], rules: BreakerRules, now_ms: u64);
}

/// Names a call on its way, for its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallId(pub u64);

/// What to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// A script call (by SHA, resent as `EVAL` if Redis lost the script).
    Script(Call),
    /// A plain command.
    Plain(Vec<u8>),
}

/// Something the node raises for the operator (logged by the module).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alert {
    /// The replay queue is full: a spend was dropped (first of a run).
    ReplaysDropped { dropped: u64 },
    /// A worker exits with refusals Redis never took.
    BatchesLost { lost: u64 },
}

/// What the module does next, in order.
#[derive(Debug)]
pub enum Step<W> {
    /// The request has its answer.
    Deliver(W, Reply),
    /// Redis did not answer it (`sent`: after the call may have reached
    /// Redis): the fallback rule decides (`fallback::decider`).
    FallBack {
        waiter: W,
        failure: Unavailable,
        sent: bool,
    },
    /// Submit `command`, routed by `route` (a key of the call, or the
    /// client's hash tag; empty where no router reads it: `slot` given,
    /// or one Redis); its reply goes to `on_reply(id, ..)`, a refusal
    /// of the router to `unsent(id, ..)`.
    Send {
        id: CallId,
        route: Vec<u8>,
        /// The Redis Cluster slot of `route` where the call knows it
        /// already (`None`: the router computes it).
        slot: Option<u16>,
        command: Command,
    },
    /// Run the batch timer in `in_ms` (`if_unset`: only if it is not set);
    /// `cancelable`: it does not hold an exiting worker.
    Timer {
        in_ms: u64,
        if_unset: bool,
        cancelable: bool,
    },
    Alert(Alert),
}

/// How a call that requests waited on failed: with what, and whether
/// Redis may have run it (a [`Step::FallBack`]'s `sent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Fell {
    pub failure: Unavailable,
    pub sent: bool,
}

impl Fell {
    /// No reply came (a timeout, a dropped connection, a late call):
    /// `sent` when Redis may have run it.
    pub fn down(sent: bool) -> Fell {
        Fell {
            failure: Unavailable::Down,
            sent,
        }
    }
}

/// What an operation gets at once.
#[derive(Debug, PartialEq, Eq)]
pub enum Answered {
    /// The node's answer.
    Now(Reply),
    /// It waits: its answer comes as a [`Step::Deliver`] or
    /// [`Step::FallBack`].
    Later,
    /// Redis's word cannot be had: the fallback rule decides now.
    FallBack(Unavailable),
}

/// A call on its way, and what its reply decides.
enum Flight<W> {
    /// One request's check under the location's one limit (`group`: the
    /// requests that joined it).
    Check(check::OneCheck<W>),
    /// Stacked checks (a request's every limit, a part of it in one
    /// slot, or one `approx` limit), alone or gathered (`stacks.rs`).
    Stacks(stacks::Stacks<W>),
    /// Joined requests of one client, decided in one call.
    Together(check::Together<W>),
    /// Checks of several clients, gathered in one call (`gather.rs`).
    Checks(gather::Checks<W>),
    Strike(spend::StrikeCall<W>),
    Spend(spend::SpendCall<W>),
    /// A spend the fallback made, written to Redis.
    Replay(crate::cluster::replays::Replay),
    /// Refusals counted here, per client.
    Batch(batches::BatchCall),
    /// What one such call counted, taken back.
    Undo,
    /// The single Redis's generation key, read.
    GenCheck,
    /// The single Redis's generation, read or renewed.
    GenAsk,
}

/// One worker's cluster node.
pub struct ClusterNode<W> {
    calls: Calls,
    /// What the refusals this node learns are about (`refusals::scope`).
    scope: u64,
    /// A Redis Cluster: a spent record lives in its client's slot, and the
    /// data generation is the slot's.
    cluster: bool,
    /// Makes sorted-set members unique within this worker.
    seq: u64,
    /// This worker's random name (a fresh generation is derived from it).
    node_id: u64,
    flights: flights::Flights<Flight<W>>,
    groups: HashMap<RefusalKey, Group<W>>,
    /// Exact checks per slot (one Redis: 0): those on their way, and
    /// those gathered behind them to go in one call (`gather.rs`).
    gathering: gather::Gatherings<check::OneCheck<W>>,
    /// Stacked checks per slot, as `gathering` (`stacks.rs`).
    stacking: stacks::Stacking<W>,
    /// Checks gathered or in gathered calls, exact or stacked
    /// (`gather::MAX_HELD`).
    held: usize,
    /// Checks whose limits lie in several slots, by request.
    sharded: Ids<u64, sharded::Sharded<W>>,
    next_request: u64,
    /// Lists decided requests gave back (`spare.rs`).
    spare: spare::Spare,
    batches: Batches<BatchContext>,
    exiting_since: Option<u64>,
    replays: Replays,
    generations: Tracker,
    local_generation: u64,
    /// A connection was ready before: the next one follows an outage.
    connected_once: bool,
}

impl<W: Waits> ClusterNode<W> {
    /// A node whose calls `calls` builds; `scope` names its Redis,
    /// `local_generation` the node's own generation, `node_id` this
    /// worker.
    pub fn new(calls: Calls, scope: u64, local_generation: u64, node_id: u64) -> Self {
        let cluster = calls.cluster();
        ClusterNode {
            calls,
            scope,
            cluster,
            seq: 0,
            node_id,
            flights: flights::Flights::default(),
            groups: HashMap::new(),
            gathering: gather::Gatherings::default(),
            stacking: stacks::Stacking::default(),
            held: 0,
            sharded: Ids::default(),
            next_request: 0,
            spare: spare::Spare::default(),
            batches: Batches::default(),
            exiting_since: None,
            replays: Replays::new(MAX_REPLAYS),
            generations: Tracker::new(local_generation, cluster),
            local_generation,
            connected_once: false,
        }
    }

    /// The calls this node builds (the admin's use its prefix).
    pub fn calls(&self) -> &Calls {
        &self.calls
    }

    /// Asks `op` for `subject` at `now` under `fail`; `waiter` makes the
    /// request's waiter, only if it waits. What else to do goes to `out`.
    pub fn ask(
        &mut self,
        env: &mut impl Around,
        (op, subject, fail): (Op, &Subject, FailPolicy),
        now: Now,
        waiter: impl FnOnce() -> W,
        out: &mut Vec<Step<W>>,
    ) -> Answered {
        match op {
            // (The decision checks only where a limit is set.)
            Op::Check { .. } if subject.limits.is_empty() => Answered::Now(check::admitted()),
            Op::Check { offence } => self.check(env, subject, (offence, fail), now, waiter, out),
            Op::Spend(solution) => self.spend(env, subject, solution, now, waiter, out),
            Op::Strike => self.strike(env, subject, fail, now, waiter, out),
        }
    }

    /// The reply to call `id` (`None`: none came, a timeout or a dropped
    /// connection).
    pub fn on_reply(
        &mut self,
        env: &mut impl Around,
        id: CallId,
        frame: Option<&Frame>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let Some(flight) = self.flights.remove(id) else {
            return;
        };
        match flight {
            Flight::Check(c) => self.checked(env, c, frame, now, out),
            Flight::Stacks(s) => self.stacks_answered(env, s, frame, now, out),
            Flight::Together(t) => self.together_checked(env, t, frame, now, out),
            Flight::Checks(c) => self.checks_answered(env, c, frame, now, out),
            Flight::Strike(s) => self.struck(env, s, frame, now, out),
            Flight::Spend(s) => self.spent(env, s, frame, now, out),
            Flight::Replay(r) => self.replayed(r, frame, now, out),
            Flight::Batch(b) => self.batch_answered(env, b, frame, now, out),
            Flight::Undo => {}
            Flight::GenCheck => self.generation_checked(frame, now, out),
            Flight::GenAsk => self.generation_answered(frame),
        }
    }

    /// The router did not take call `id` (`failure`): it never reached
    /// Redis.
    pub fn unsent(
        &mut self,
        env: &mut impl Around,
        id: CallId,
        failure: Unavailable,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let Some(flight) = self.flights.remove(id) else {
            return;
        };
        let fall_back = |waiter| Step::FallBack {
            waiter,
            failure,
            sent: false,
        };
        match flight {
            Flight::Check(c) => {
                out.push(fall_back(c.waiter));
                let never_sent = Some(Fell {
                    failure,
                    sent: false,
                });
                if let (true, Some(group)) = (c.group, &c.refusal) {
                    self.release(env, group, now, never_sent, out);
                }
                if let Some(slot) = c.gate {
                    self.gate_done(env, slot, never_sent, now, out);
                }
            }
            Flight::Checks(c) => self.checks_unsent(env, c, failure, now, out),
            Flight::Stacks(s) => self.stacks_unsent(env, s, failure, now, out),
            Flight::Together(t) => {
                out.extend(t.joiners.into_iter().map(fall_back));
                let never_sent = Fell {
                    failure,
                    sent: false,
                };
                self.release(env, &t.group.refusal, now, Some(never_sent), out);
            }
            Flight::Strike(s) => out.push(fall_back(s.waiter)),
            Flight::Spend(s) => out.push(fall_back(s.waiter)),
            Flight::Replay(r) => {
                self.replays.hold(now.epoch_ms);
                self.queue_replay((&r.digest, r.key, r.tag, r.expires_at_ms), now, out);
            }
            Flight::Batch(b) => self.batch_failed(b, out, env),
            Flight::Undo | Flight::GenCheck => {}
            Flight::GenAsk => self.generation_answered(None),
        }
    }

    /// The admin lifts `key`'s block: the node's refusals of the client
    /// under `limits` (each exact or approximate) go at once (their
    /// strikes were Redis's word before the lift); Redis decides its next
    /// request.
    pub fn lift(
        &mut self,
        env: &mut impl Around,
        key: &[u8],
        limits: &[(RateLimit, bool)],
        now: Now,
    ) {
        for &(limit, approx) in limits {
            env.forget_refusal(
                &refusal_key(self.scope, limit, approx, key),
                now.monotonic_ms,
            );
        }
    }

    /// Calls on their way (none left once every reply came).
    pub fn in_flight(&self) -> usize {
        self.flights.len()
    }

    fn next_seq(&mut self) -> u64 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sends `command` for `flight`, routed by `route`.
    fn send(
        &mut self,
        flight: Flight<W>,
        route: Vec<u8>,
        command: Command,
        out: &mut Vec<Step<W>>,
    ) {
        self.send_in(flight, (route, None), command, out);
    }

    /// [`Self::send`], the slot of `route` known already (`Some`).
    #[inline(always)]
    fn send_in(
        &mut self,
        flight: Flight<W>,
        (route, slot): (Vec<u8>, Option<u16>),
        command: Command,
        out: &mut Vec<Step<W>>,
    ) {
        let id = self.flights.insert(flight);
        out.push(Step::Send {
            id,
            route,
            slot,
            command,
        });
    }

    /// Sends a request's script call, after the spends waiting for Redis
    /// (they take back strikes the call may find).
    fn send_script(
        &mut self,
        env: &mut impl Around,
        flight: Flight<W>,
        route: Vec<u8>,
        call: Call,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        self.send_script_in(env, flight, (route, None), call, now, out);
    }

    /// [`Self::send_script`], the slot of the route known already
    /// (`Some`).
    #[inline(always)]
    fn send_script_in(
        &mut self,
        env: &mut impl Around,
        flight: Flight<W>,
        route: (Vec<u8>, Option<u16>),
        call: Call,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        self.write_replays(env, now, out);
        self.send_in(flight, route, Command::Script(call), out);
    }

    /// A block of `key` Redis reported that answers the request now
    /// (under `open`, only while Redis answers).
    fn standing_block(
        &self,
        env: &mut impl Around,
        key: &[u8],
        rules: BreakerRules,
        fail: FailPolicy,
        now: Now,
    ) -> Option<BreakerStatus> {
        let breaker = env.blocked(key, rules, now.monotonic_ms)?;
        let reach = env.reach(self.calls.tag(key).as_bytes(), None);
        crate::cluster::fallback::node_answers(crate::cluster::fallback::Known::Block, reach, fail)
            .then_some(breaker)
    }
}

/// The answer to a check of a client blocked while its block holds.
fn blocked(breaker: BreakerStatus) -> Checked {
    Checked {
        breaker,
        ..Checked::default()
    }
}

/// Keeps a block Redis reported for `key` (only where a breaker is on).
fn remember(
    env: &mut impl Around,
    key: &[u8],
    breaker: BreakerStatus,
    rules: BreakerRules,
    now: Now,
) {
    if rules.strikes.is_some() || rules.ban.is_some() {
        env.remember(key, breaker, rules, now.monotonic_ms);
    }
}

#[cfg(test)]
mod tests;

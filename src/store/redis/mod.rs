//! Cluster mode: the store in Redis (docs/operations.md, "Sizing Redis").
//! What the node decides (local refusals, coalescing, batches, known
//! blocks, spends written after an outage, generations) is the core's
//! `ClusterNode` (`pow_shield_core::cluster::node`): this file hands it
//! each operation, carries the steps it answers to the router and the
//! requests' waiters, and hands it back each reply. What Redis does not
//! answer the fallback rule decides (`crate::store::Late`).
//!
//! Beside it: `start.rs` (the handshake, the router), `node_cache.rs`
//! (what the node keeps in the zone), `timer.rs` (the batch timer),
//! `admin.rs` (`pow_shield_admin`'s calls).

mod admin;
mod node_cache;
mod start;
mod timer;

use core::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use nginx_sys::ngx_log_t;

use self::node_cache::Env;
pub use self::node_cache::NodeCache;
use super::{Asked, Late, NewWaiter, Poll, Replay, Unavailable, Waiter};
use crate::ffi::now_ms;
use crate::redis::client::{Awaits, OnFrame};
use crate::redis::router::Router;
use pow_shield_core::cluster::calls::Call;
use pow_shield_core::cluster::keys;
use pow_shield_core::cluster::node::{
    in_turn, Alert, Answered, CallId, ClusterNode, Command, RefusalKeys, Step, Waits, MAX_REPLAYS,
};
use pow_shield_core::limiter::breaker::{BreakerRules, BreakerStatus};
use pow_shield_core::redis::cluster::ClientSlot;
use pow_shield_core::redis::command::Frame;
use pow_shield_core::redis::script_call;
use pow_shield_core::store::{Now, Reply, Solution, Spendable};
use pow_shield_core::syntax::FailPolicy;
use timer::{fresh_monotonic_ms, BatchTimer};

/// The most steps a kept list holds room for.
const SPARE_STEPS: usize = 64;

/// Script calls kept once sent, to hold the next ones: the call sent this
/// many calls ago is reused once nothing holds it any more (a worker with
/// fewer calls than this on their way allocates none; with more, each
/// call allocates as before).
const KEPT_CALLS: usize = 8;

/// A request waiting in the node.
struct Held(Rc<Waiter>);

impl Waits for Held {
    fn waiting(&self) -> bool {
        self.0.is_waiting()
    }
}

/// The Redis store of one worker.
pub struct RedisStore {
    router: Router,
    node: RefCell<ClusterNode<Held>>,
    /// The zone's keys of the refusals the node looked up, borrowed with
    /// the node (each `TableKey::new` of its bytes: kept across operations,
    /// not made and moved into every operation's surroundings).
    refusal_keys: RefCell<RefusalKeys>,
    /// What the node keeps in the zone beside Redis (none if nginx could
    /// not map the zone).
    cache: Option<NodeCache>,
    batch_timer: BatchTimer,
    /// The list of steps the node last answered, emptied, for the next
    /// (measured: a request's two lists were two allocations).
    spare_steps: Cell<Vec<Step<Held>>>,
    /// The script calls last sent, oldest first, each shared with the
    /// router while on its way: one the router let go of holds the next
    /// call (measured: a call's shared allocation was an allocation and
    /// a free a call).
    kept_calls: RefCell<[Option<Rc<Call>>; KEPT_CALLS]>,
    /// The place in `kept_calls` of the next call.
    next_kept: Cell<usize>,
    /// Which slot a client's keys take (`pow_shield_redis ... slot=`),
    /// as the node's calls have it.
    client_slot: ClientSlot,
    log: *mut ngx_log_t,
    me: Weak<RedisStore>,
}

impl RedisStore {
    pub fn retry_in_ms(&self) -> Option<u64> {
        self.router.retry_in_ms()
    }

    /// Whether an unpaid refusal of client `key` counts a strike now: not
    /// within a grace after an outage (`health::RECOVERY_GRACE_MS`).
    pub fn strikes_unpaid(&self, key: &[u8]) -> bool {
        self.router
            .strikes_unpaid(|| keys::client_tag_in(key, self.client_slot).text())
    }

    /// The worker exits (`exit_process`): what Redis did not take of its
    /// batches is given up (logged), the connections closed.
    pub fn shutdown(&self) {
        self.batch_timer.cancel();
        self.drive(|node, _, _, out| node.give_up(out));
        self.router.shutdown();
    }

    /// Asks the node for `asked`: an answer at once, or later through the
    /// waiter (`Poll::Pending`); what Redis does not take now comes back
    /// with what the fallback rule needs of it (`Poll::Failed`), and a
    /// failure later is decided through the waiter, which keeps it
    /// (`Waiter::fall_back`).
    pub fn ask(&self, asked: &Asked, fail: FailPolicy, waiter: &mut NewWaiter) -> Poll {
        let (op, subject) = (asked.op, asked.subject);
        let made: Cell<Option<Rc<Waiter>>> = Cell::new(None);
        let mut out = self.spare_steps.take();
        let answered = {
            let (Ok(mut node), Ok(mut keys)) = (
                self.node.try_borrow_mut(),
                self.refusal_keys.try_borrow_mut(),
            ) else {
                return Poll::Ready(Reply::Down);
            };
            let hold = || {
                let held = waiter();
                held.keep(asked);
                made.set(Some(held.clone()));
                Held(held)
            };
            node.ask(
                &mut self.env(&mut keys),
                (op, subject, fail),
                now(),
                hold,
                &mut out,
            )
        };
        let asker = made.take();
        let failed = self.execute(out, asker.as_ref());
        match answered {
            Answered::Now(reply) => Poll::Ready(reply),
            Answered::FallBack(failure) => Poll::Failed(failure, Late::of(asked)),
            Answered::Later => match failed {
                // Not sent: the request is decided now.
                Some(failure) => match asker.and_then(|w| w.take_late()) {
                    Some(late) => Poll::Failed(failure, late),
                    None => Poll::Ready(Reply::Down),
                },
                None => Poll::Pending,
            },
        }
    }

    /// The zone spent (or recorded) a token for Redis: written to Redis
    /// once it takes commands again.
    pub fn replay_later(&self, replay: &Replay) {
        self.drive(|node, _, now, out| node.replay_later(&replay.key, &replay.solution, now, out));
    }

    /// The generation a challenge issued now for client `key` carries
    /// (`answered`: the one its check answered).
    pub fn challenge_generation(&self, key: &[u8], answered: Option<u64>) -> Option<u64> {
        self.drive(|node, env, now, out| node.challenge_generation(env, (key, answered), now, out))
            .flatten()
    }

    /// Whether only Redis may spend `solution` of client `key`
    /// (`ClusterNode::redis_only`).
    pub fn redis_only(&self, solution: &Solution, key: &[u8]) -> bool {
        self.drive(|node, env, now, out| node.redis_only(env, solution, key, now, out))
            .unwrap_or(true)
    }

    /// Whether a solution of a challenge issued in `generation` may be
    /// spent now by the client `key`.
    pub fn accepts(&self, generation: Option<u64>, key: &[u8]) -> Spendable {
        self.drive(|node, env, now, out| node.accepts(env, (generation, key), now, out))
            .unwrap_or(Spendable::NotNow)
    }

    /// A block of `key` this node learnt from Redis and that still holds.
    pub(in crate::store) fn known_block(
        &self,
        key: &[u8],
        rules: BreakerRules,
    ) -> Option<BreakerStatus> {
        self.cache
            .as_ref()?
            .blocked(key, rules, crate::ffi::monotonic_ms())
    }

    /// A connection to Redis is ready.
    fn on_connected(&self) {
        self.drive(|node, env, now, out| node.connected(env, now, out));
    }

    /// The batch timer ran (`exiting`: the worker exits).
    fn on_tick(&self, exiting: bool) {
        self.drive(|node, env, now, out| node.tick(env, now, exiting, out));
    }

    /// The reply to call `id` came (or none: a timeout).
    fn on_reply(&self, id: CallId, frame: Option<&Frame>) {
        self.drive(|node, env, now, out| node.on_reply(env, id, frame, now, out));
    }

    fn env<'a>(&'a self, keys: &'a mut RefusalKeys) -> Env<'a> {
        Env {
            router: &self.router,
            cache: self.cache.as_ref(),
            keys,
        }
    }

    /// Runs `f` on the node, then carries out the steps it answered;
    /// `None` only if the node was busy (never: not borrowed across a call).
    fn drive<R>(
        &self,
        f: impl FnOnce(&mut ClusterNode<Held>, &mut Env, Now, &mut Vec<Step<Held>>) -> R,
    ) -> Option<R> {
        let steps = self.steps(f);
        self.execute(steps.1, None);
        steps.0
    }

    /// Runs `f` on the node: what it returns, and the steps it answered.
    fn steps<R>(
        &self,
        f: impl FnOnce(&mut ClusterNode<Held>, &mut Env, Now, &mut Vec<Step<Held>>) -> R,
    ) -> (Option<R>, Vec<Step<Held>>) {
        let mut out = self.spare_steps.take();
        let r = match (
            self.node.try_borrow_mut(),
            self.refusal_keys.try_borrow_mut(),
        ) {
            (Ok(mut node), Ok(mut keys)) => {
                Some(f(&mut node, &mut self.env(&mut keys), now(), &mut out))
            }
            _ => None,
        };
        (r, out)
    }

    /// Carries out the node's steps, in order (with those they lead to).
    /// A call of `asker`'s that the router did not take is not decided
    /// here: its failure is returned, for the request to decide now.
    fn execute(&self, steps: Vec<Step<Held>>, asker: Option<&Rc<Waiter>>) -> Option<Unavailable> {
        let mut failed = None;
        // (No queue: measured, its pops were some 60 instructions a request.)
        let steps = in_turn(steps, |step, more| {
            self.carry_out(step, asker, &mut failed, more);
        });
        // (Empty: kept for the next steps, unless grown by a burst.)
        if steps.capacity() <= SPARE_STEPS {
            self.spare_steps.set(steps);
        }
        failed
    }

    /// Carries out one step; the steps it leads to go to `more`, and the
    /// failure of a call of `asker`'s the router did not take to `failed`.
    #[inline(always)]
    fn carry_out(
        &self,
        step: Step<Held>,
        asker: Option<&Rc<Waiter>>,
        failed: &mut Option<Unavailable>,
        more: &mut Vec<Step<Held>>,
    ) {
        match step {
            Step::Deliver(Held(waiter), reply) => waiter.deliver(reply),
            Step::FallBack {
                waiter: Held(waiter),
                failure,
                sent,
            } => {
                if !sent && asker.is_some_and(|a| Rc::ptr_eq(a, &waiter)) {
                    *failed = Some(failure);
                    return;
                }
                if let Some(replay) = waiter.fall_back(failure, sent) {
                    more.append(
                        &mut self
                            .steps(|node, _, now, out| {
                                node.replay_later(&replay.key, &replay.solution, now, out)
                            })
                            .1,
                    );
                }
            }
            Step::Send {
                id,
                route,
                slot,
                command,
            } => {
                if let Err(failure) = self.submit(id, (&route, slot), command) {
                    let unsent = |node: &mut ClusterNode<Held>, env: &mut Env, now, out: &mut _| {
                        node.unsent(env, id, failure, now, out)
                    };
                    more.append(&mut self.steps(unsent).1);
                }
            }
            Step::Timer {
                in_ms,
                if_unset,
                cancelable,
            } => self.batch_timer.arm(in_ms, if_unset, cancelable),
            Step::Alert(alert) => self.alert(alert),
        }
    }

    /// Submits call `id` (a script by SHA, resent as EVAL if Redis lost
    /// it), routed by `route` in a Redis Cluster; its reply comes back to
    /// `Awaits::answered`.
    fn submit(
        &self,
        id: CallId,
        route: (&[u8], Option<u16>),
        command: Command,
    ) -> Result<(), Unavailable> {
        let me: Weak<dyn Awaits> = self.me.clone();
        let on_reply = OnFrame::Of(me, id.0);
        match command {
            // Sent again as `EVAL` only if Redis lost the script (SCRIPT
            // FLUSH, a restart).
            Command::Script(call) => self.router.submit(route, self.shared(call), on_reply),
            Command::Plain(command) => self.router.submit(route, Rc::new(command), on_reply),
        }
    }

    /// `call`, shared: in the allocation of the call sent `KEPT_CALLS`
    /// calls ago if the router let go of it (answered), else in a new one,
    /// kept in its place.
    fn shared(&self, call: Call) -> Rc<Call> {
        let at = self.next_kept.get();
        self.next_kept.set((at + 1) % KEPT_CALLS);
        let Ok(mut kept) = self.kept_calls.try_borrow_mut() else {
            return Rc::new(call);
        };
        let Some(slot) = kept.get_mut(at) else {
            return Rc::new(call);
        };
        if let Some(kept) = slot.as_mut() {
            if let Some(free) = Rc::get_mut(kept) {
                // (Its buffer holds the next call: `script_call::give_back`.)
                let done = core::mem::replace(free, call);
                script_call::give_back(done.evalsha);
                return kept.clone();
            }
        }
        let shared = Rc::new(call);
        *slot = Some(shared.clone());
        shared
    }

    fn alert(&self, alert: Alert) {
        match alert {
            Alert::ReplaysDropped { dropped } => error!(
                self.log,
                "pow_shield: {MAX_REPLAYS} tokens spent while redis was unavailable wait to be \
                 written to it; further ones are refused by this node only ({dropped} so far)"
            ),
            Alert::BatchesLost { lost } => error!(
                self.log,
                "pow_shield: redis did not take {lost} refusals counted by this worker \
                 before it exits; their strikes are lost"
            ),
        }
    }
}

impl Awaits for RedisStore {
    fn answered(&self, id: u64, frame: Option<&Frame>) {
        self.on_reply(CallId(id), frame);
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        self.batch_timer.cancel();
    }
}

/// Both clocks now (the monotonic one read fresh: a local refusal ends at
/// `T` even late in a long loop iteration).
fn now() -> Now {
    Now {
        monotonic_ms: fresh_monotonic_ms(),
        epoch_ms: now_ms(),
    }
}

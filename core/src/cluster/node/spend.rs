//! Strikes, spends, and what the node does around an outage: the node's
//! replay cache consulted and written beside Redis, the spends the zone
//! decided meanwhile queued and written to Redis once it takes commands
//! again (by the spend script, so that they take back the 429's strike
//! there too), in batches that never crowd out the requests' commands;
//! and the data generations (docs/operations.md, "Choosing a fail
//! policy"): the one a challenge carries, and whether a solution of one
//! may be spent now. A solution that may not is the node's to answer
//! (`Spent::NotRecorded`: a fresh challenge, no offence, and who takes
//! its 429's strike back): the request's decision never sees a generation.

use super::{remember, Alert, Answered, Around, ClusterNode, Command, Flight, Step, Waits};
use crate::cluster::calls::{self, single_limit};
use crate::cluster::fallback::{Answer, Unavailable};
use crate::cluster::generation::{self, slot_of_tag, Generations};
use crate::cluster::refusals::{refusal_key, RefusalKey};
use crate::cluster::replays::{Queued, Replay};
use crate::limiter::breaker::{opened_block, Block, BreakerRules};
use crate::redis::command::{encode, Frame};
use crate::store::{Now, Reply, Solution, Spendable, Spent, Struck, Subject};
use crate::syntax::FailPolicy;

/// Spends kept per worker for Redis: an outage of minutes at a high solve
/// rate. Beyond it a token is dropped (counted, logged once): the node that
/// spent it still refuses it; only other nodes could accept it once more.
pub const MAX_REPLAYS: usize = 4096;

/// Queued spends written per request or reconnect: well under the
/// client's cap of commands in flight, so the writes never crowd out the
/// requests' own commands after an outage.
const REPLAY_BATCH: usize = 64;

/// A strike on its way.
pub(super) struct StrikeCall<W> {
    pub waiter: W,
    key: Vec<u8>,
    rules: BreakerRules,
    refusal: Option<RefusalKey>,
}

/// A spend on its way.
pub(super) struct SpendCall<W> {
    pub waiter: W,
    key: Vec<u8>,
    rules: BreakerRules,
    digest: [u8; 32],
    until_ms: u64,
    refusal: Option<RefusalKey>,
    /// The Redis generation it is spent in (none: the node's own).
    generation: Option<u64>,
    /// Its 429's strike is owed back if it is not spent.
    owed: bool,
}

impl<W: Waits> ClusterNode<W> {
    pub(super) fn strike(
        &mut self,
        env: &mut impl Around,
        subject: &Subject,
        fail: FailPolicy,
        now: Now,
        waiter: impl FnOnce() -> W,
        out: &mut Vec<Step<W>>,
    ) -> Answered {
        let (key, rules) = (subject.key, subject.rules);
        if let Some(breaker) = self.standing_block(env, key, rules, fail, now) {
            return Answered::Now(Reply::Struck(Struck {
                breaker,
                struck: false,
            }));
        }
        let tag = self.calls.tag(key);
        let call = self.calls.strike(tag.as_bytes(), rules);
        let flight = Flight::Strike(StrikeCall {
            waiter: waiter(),
            key: key.to_vec(),
            rules,
            refusal: self.refusal_of(env, subject),
        });
        self.send_script(env, flight, tag.to_vec(), call, now, out);
        Answered::Later
    }

    pub(super) fn struck(
        &mut self,
        env: &mut impl Around,
        s: StrikeCall<W>,
        frame: Option<&Frame>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let answer = Answer::of(frame);
        let ran = answer.may_have_run();
        let reply = answer
            .integers()
            .and_then(|r| calls::struck_reply(&r, s.rules));
        let Some(reply) = reply else {
            return out.push(Step::FallBack {
                waiter: s.waiter,
                failure: Unavailable::Down,
                sent: ran,
            });
        };
        if let Reply::Struck(Struck { breaker, .. }) = reply {
            // The strike that opened the breaker: blocked here from the
            // next request on (not refused once more).
            let keep = opened_block(&breaker, s.rules).unwrap_or(breaker);
            remember(env, &s.key, keep, s.rules, now);
            if let (Some(refusal), false) = (&s.refusal, keep.block == Block::Clear) {
                env.forget_refusal(refusal, now.monotonic_ms);
            }
        }
        out.push(Step::Deliver(s.waiter, reply));
    }

    pub(super) fn spend(
        &mut self,
        env: &mut impl Around,
        subject: &Subject,
        solution: Solution,
        now: Now,
        waiter: impl FnOnce() -> W,
        out: &mut Vec<Step<W>>,
    ) -> Answered {
        let digest = solution.digest;
        // Spent here already (while Redis was down or busy): a replay, and
        // nothing to take back, whatever its generation; Redis learns of it
        // from the queue.
        if env.is_spent(&digest, now.epoch_ms) {
            let spent_key = self.calls.spent_key(&digest, subject.key);
            let tag = self.calls.tag(subject.key);
            self.queue_replay(
                (&digest, spent_key, tag.text(), solution.spent_until_ms),
                now,
                out,
            );
            return Answered::Now(Reply::Spent(Spent::Replayed));
        }
        if !self.spendable(env, &solution, subject.key, now, out) {
            return unspendable(env, &solution, subject.rules);
        }
        let spent_key = self.calls.spent_key(&digest, subject.key);
        let tag = self.calls.tag(subject.key);
        // The strikes this worker counted for the client go first: the
        // spend takes one of them back.
        self.send_batch_now(env, subject, now, out);
        // Within Redis's generation (a Redis Cluster: the slot's),
        // atomically; a challenge issued here during an outage is spent as
        // before: the zone has its spend.
        let in_generation = self.generations(env).spent_in(solution.generation);
        let call = self.calls.spend(
            &spent_key,
            tag.as_bytes(),
            &solution,
            subject.rules,
            in_generation,
            now.epoch_ms,
        );
        let flight = Flight::Spend(SpendCall {
            waiter: waiter(),
            key: subject.key.to_vec(),
            rules: subject.rules,
            digest,
            until_ms: solution.spent_until_ms,
            refusal: self.refusal_of(env, subject),
            generation: in_generation,
            owed: solution.owed(subject.rules),
        });
        self.send_script(env, flight, spent_key.into_bytes(), call, now, out);
        Answered::Later
    }

    pub(super) fn spent(
        &mut self,
        env: &mut impl Around,
        s: SpendCall<W>,
        frame: Option<&Frame>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let answer = Answer::of(frame);
        let ran = answer.may_have_run();
        let fall_back = |waiter| Step::FallBack {
            waiter,
            failure: Unavailable::Down,
            sent: ran,
        };
        let Some(ints) = answer.integers() else {
            return out.push(fall_back(s.waiter));
        };
        let slot = || slot_of_tag(self.calls.tag(&s.key).as_bytes());
        let spent = match calls::spent_reply(&ints) {
            // Run within its generation: the slot's now (in a Redis
            // Cluster, news to this worker when newer than it knew).
            Ok(Some(spent)) => {
                if self.cluster {
                    self.generations.note_slot(slot(), s.generation);
                }
                spent
            }
            Ok(None) => return out.push(fall_back(s.waiter)),
            // The generation is gone (a flush, a failover): what was spent
            // in it is unknown, so this is refused as a replay (409 with a
            // fresh challenge); the challenges from now on, that one too,
            // carry the new generation (a slot's is in the reply). One
            // newer than the slot's (they grow with Redis's clock) was
            // never the slot's: another node's outage generation, not
            // recorded, no offence.
            Err(renewed) => {
                self.generation_gone(slot(), renewed, now, out);
                let spent = match (s.generation, renewed) {
                    (Some(token), Some(slot)) if token > slot => {
                        Spent::NotRecorded { pays_back: s.owed }
                    }
                    _ => Spent::Replayed,
                };
                return out.push(Step::Deliver(s.waiter, Reply::Spent(spent)));
            }
        };
        let spent = match spent {
            // First in Redis, but maybe spent here while Redis was down
            // (and not written to it yet, or dropped from the queue).
            Spent::Accepted(breaker) => {
                if let Some(refusal) = &s.refusal {
                    env.refusal_forgiven(refusal, breaker.strikes);
                }
                // Recorded in the node's replay cache too, so that the node
                // refuses the token during a later outage, and the unpaid
                // strike the zone may hold for the client (a 429 it decided
                // while Redis was busy or down) is taken back. A cache
                // without room changes nothing: Redis holds the record.
                let recorded = env.record_spent(&s.digest, s.until_ms, now.epoch_ms);
                if recorded == Ok(true) {
                    env.forgive(&s.key, s.rules, now.monotonic_ms);
                }
                match recorded {
                    Ok(false) => Spent::Replayed,
                    _ => Spent::Accepted(breaker),
                }
            }
            Spent::Blocked(breaker) => {
                remember(env, &s.key, breaker, s.rules, now);
                Spent::Blocked(breaker)
            }
            spent @ (Spent::Replayed | Spent::NotRecorded { .. }) => spent,
        };
        out.push(Step::Deliver(s.waiter, Reply::Spent(spent)));
    }

    /// Whether `solution` of client `key` may be spent now
    /// (`Tracker::accepts`): within Redis's generation as this worker knows
    /// it; in a Redis Cluster, of a slot generation not older than the one
    /// the last reply said for its slot (one older was replaced by a flush
    /// or a failover: not spent, a fresh challenge of the current one, no
    /// offence). One newer is news to this worker, not age: Redis's
    /// generation spend decides it atomically (spent if it is the slot's,
    /// else a replay that tells the slot's).
    pub fn spendable(
        &mut self,
        env: &impl Around,
        solution: &Solution,
        key: &[u8],
        now: Now,
        out: &mut Vec<Step<W>>,
    ) -> bool {
        self.accepts(env, (solution.generation, key), now, out) == Spendable::Now
    }

    /// Whether only Redis may spend `solution` of client `key`: one of
    /// Redis's generation (the zone does not know what other nodes spent
    /// through Redis), or one not spendable now. If Redis fails its spend,
    /// the zone never admits with it (`fallback::decider`).
    pub fn redis_only(
        &mut self,
        env: &impl Around,
        solution: &Solution,
        key: &[u8],
        now: Now,
        out: &mut Vec<Step<W>>,
    ) -> bool {
        let of_redis = self.generations(env).spent_in(solution.generation);
        of_redis.is_some() || !self.spendable(env, solution, key, now, out)
    }

    /// The zone spent (or recorded) a token of client `key` for Redis:
    /// written to Redis once it takes commands again.
    pub fn replay_later(
        &mut self,
        key: &[u8],
        solution: &Solution,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let digest = solution.digest;
        let spent_key = self.calls.spent_key(&digest, key);
        let tag = self.calls.tag(key);
        self.queue_replay(
            (&digest, spent_key, tag.text(), solution.spent_until_ms),
            now,
            out,
        );
    }

    /// The local refusal of the subject's client, if it has one limit and
    /// the node a zone.
    fn refusal_of(&self, env: &impl Around, subject: &Subject) -> Option<RefusalKey> {
        let limit = single_limit(subject).filter(|_| env.has_zone())?;
        Some(refusal_key(
            self.scope,
            limit,
            subject.limits.approx(0),
            subject.key,
        ))
    }

    /// Redis could not take this spend: written later.
    pub(super) fn queue_replay(
        &mut self,
        (digest, key, tag, until_ms): (&[u8; 32], String, String, u64),
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let queued = self.replays.push(digest, key, tag, until_ms, now.epoch_ms);
        if let Queued::Dropped { .. } = queued {
            crate::metrics::redis_replay_dropped();
        }
        if let Queued::Dropped { first: true } = queued {
            let dropped = self.replays.dropped();
            out.push(Step::Alert(Alert::ReplaysDropped { dropped }));
        }
    }

    /// Writes the queued spends the fallback made, now that Redis answers.
    /// (Asked where it is called whether any is queued: every script call
    /// of every request comes here.)
    #[inline]
    pub(super) fn write_replays(
        &mut self,
        env: &mut impl Around,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        if !self.replays.is_empty() {
            self.write_queued_replays(env, now, out);
        }
    }

    /// [`Self::write_replays`] while some spend is queued.
    fn write_queued_replays(&mut self, env: &mut impl Around, now: Now, out: &mut Vec<Step<W>>) {
        let now_ms = now.epoch_ms;
        // Every request comes here: in a cluster with one master down the
        // router is healthy yet that master's tokens are refused, so passes
        // are rationed (`Replays::pass_now`, `hold`).
        if !self.replays.pass_now(now_ms) || !env.healthy() {
            return;
        }
        for replay in self.replays.take_due(now_ms, REPLAY_BATCH) {
            // Not in the replay cache: the request was not decided by the
            // `local` fallback (`open`, `closed`), so nothing was spent.
            if !env.is_spent(&replay.digest, now_ms) {
                continue;
            }
            // The spend script, recording whatever the breaker says (the
            // zone decided it), takes back the 429's strike in Redis too
            // when it is the first record of the token (never below 0).
            let ms = replay.expires_at_ms.saturating_sub(now_ms);
            let call = self.calls.replay(&replay.key, replay.tag.as_bytes(), ms);
            // Routed by its own key: in a cluster, its slot.
            let route = replay.key.clone().into_bytes();
            self.send(Flight::Replay(replay), route, Command::Script(call), out);
        }
    }

    /// Whether Redis took a replayed spend (whether it knew the token
    /// doesn't matter: this node refuses it anyway); if not (a restarted
    /// cluster master answers CLUSTERDOWN at first), it waits again.
    pub(super) fn replayed(
        &mut self,
        r: Replay,
        frame: Option<&Frame>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        if frame.and_then(Frame::integers).is_none() {
            self.queue_replay((&r.digest, r.key, r.tag, r.expires_at_ms), now, out);
        }
    }

    /// What this worker knows of the data generations now.
    pub fn generations(&self, env: &impl Around) -> Generations {
        self.generations.now(env.healthy())
    }

    /// The generation a challenge issued now for client `key` carries.
    /// `answered`: the one its check answered (a Redis Cluster slot's):
    /// the slot's as this worker knows it now, which a spend that found
    /// it renewed since has updated. Else the node's: another node may
    /// have renewed a single Redis's (a flush): read again at most once a
    /// second, so that the challenges after this one carry the new one.
    pub fn challenge_generation(
        &mut self,
        env: &impl Around,
        (key, answered): (&[u8], Option<u64>),
        now: Now,
        out: &mut Vec<Step<W>>,
    ) -> Option<u64> {
        if let Some(answered) = answered {
            let slot = slot_of_tag(self.calls.tag(key).as_bytes());
            let known = self.generations.slot(slot).filter(|_| self.cluster);
            return Some(known.unwrap_or(answered));
        }
        if self.generations.check_now(now.monotonic_ms) {
            let key = self.calls.gen_key().as_bytes().to_vec();
            let mut get = Vec::new();
            encode(&mut get, &[b"GET", &key]);
            self.send(Flight::GenCheck, key, Command::Plain(get), out);
        }
        self.generations(env).for_challenge()
    }

    /// Whether a solution of a challenge issued in `generation` may be
    /// spent now by the client `key` (`Tracker::accepts`).
    pub fn accepts(
        &mut self,
        env: &impl Around,
        (generation, key): (Option<u64>, &[u8]),
        now: Now,
        out: &mut Vec<Step<W>>,
    ) -> Spendable {
        let tag = self.calls.tag(key);
        let (spendable, ask) = self
            .generations
            .accepts(generation, tag.as_bytes(), env.healthy());
        if ask {
            self.ask_generation(now, out);
        }
        spendable
    }

    /// A spend found its generation gone: a Redis Cluster's slot has
    /// `renewed` now; a single Redis's is read (renewed) again.
    fn generation_gone(
        &mut self,
        slot: u16,
        renewed: Option<u64>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        if self.cluster {
            return self.generations.note_slot(slot, renewed);
        }
        self.generations.forget();
        self.ask_generation(now, out);
    }

    /// The generation key read: if it is not what this worker knows
    /// (another node renewed it, or it is gone), asks again.
    pub(super) fn generation_checked(
        &mut self,
        frame: Option<&Frame>,
        now: Now,
        out: &mut Vec<Step<W>>,
    ) {
        let value = match frame {
            Some(frame) => frame.bulk_string(),
            // No answer: nothing learnt.
            None => return,
        };
        if self.generations.checked(value) {
            self.ask_generation(now, out);
        }
    }

    /// Reads (or renews) Redis's data generation: after each handshake and
    /// when a spend found it gone. A Redis Cluster has none.
    pub(super) fn ask_generation(&mut self, now: Now, out: &mut Vec<Step<W>>) {
        if !self.generations.ask_now(now.monotonic_ms) {
            return;
        }
        // A fresh value no other worker makes: this worker's random name
        // and a count of its own.
        let fresh = mix(self.node_id ^ self.next_seq().rotate_left(32) ^ now.epoch_ms) >> 11;
        // (A Redis Cluster has none: `ask_now` said no.)
        let Some(call) = self.calls.generation(fresh) else {
            return self.generations.answered(None);
        };
        let route = self.calls.gen_key().as_bytes().to_vec();
        self.send(Flight::GenAsk, route, Command::Script(call), out);
    }

    pub(super) fn generation_answered(&mut self, frame: Option<&Frame>) {
        self.generations.answered(
            frame
                .and_then(Frame::other)
                .and_then(generation::from_reply),
        );
    }

    /// The generation of `slot` this worker last heard of, if any.
    pub fn slot_generation(&self, slot: u16) -> Option<u64> {
        self.generations.slot(slot)
    }

    /// This node's own generation (challenges issued during an outage).
    pub fn local_generation(&self) -> u64 {
        self.local_generation
    }
}

/// A 64-bit mix (splitmix64's finaliser).
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A solution the node cannot spend now: not recorded, no offence (a
/// fresh challenge). Its 429's strike, if counted, is paid back by the
/// fresh challenge; except while Redis is down with a zone, where the
/// fallback rule decides (`fallback::decider`: under `local` the zone
/// records it, and its write to Redis takes that strike back there).
fn unspendable(env: &impl Around, solution: &Solution, rules: BreakerRules) -> Answered {
    let owed = solution.owed(rules);
    if owed && !env.healthy() && env.has_zone() {
        return Answered::FallBack(Unavailable::Down);
    }
    Answered::Now(Reply::Spent(Spent::NotRecorded { pays_back: owed }))
}

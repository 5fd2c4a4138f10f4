//! Cluster mode: the store in Redis (docs/operations.md, "Sizing Redis"). One `EVALSHA` of the
//! sliding-window script per shielded request (it reads and writes the
//! client's breaker too), one `SET … NX` per spent challenge, one strike
//! script per trap hit or replay; all pipelined on this worker's connection.
//!
//! Spends Redis could not take (the request was decided by `pow_shield_fail`)
//! are queued and written to Redis once it answers again, and a spend Redis
//! calls first is also checked against the node's replay cache: a token
//! spent during an outage stays refused (docs/operations.md, "Choosing a fail policy").

use core::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use nginx_sys::ngx_log_t;
use redis_protocol::resp2::types::OwnedFrame;

use super::{Failure, Late, NewWaiter, Poll, Replay, ShmStore};
use crate::config::RedisConf;
use crate::ffi::{monotonic_ms, now_ms};
use crate::redis::client::{Client, PeerName, Settings, Tls, Unavailable};
use crate::redis::resolve::NameResolver;
use crate::redis::router::{
    Cluster, NodeTemplate, Rebuild, Router, Seed, Sentinel, SentinelTemplate,
};
use pow_shield_core::limiter::breaker::{Block, BreakerRules, BreakerStatus};
use pow_shield_core::limiter::{Limits, RateLimit, Spent, Verdict};
use pow_shield_core::redis::cluster::SLOTS;
use pow_shield_core::redis::command::{client_tag, encode, integers};
use pow_shield_core::redis::generation::{self, Generations};
use pow_shield_core::redis::keys::{self, ClientKey};
use pow_shield_core::redis::replays::Replays;
use pow_shield_core::redis::script_call::{self, ScriptCall};
use pow_shield_core::redis::scripts;
use pow_shield_core::redis::scripts::stacked;
use pow_shield_core::redis::url::{tls_name, RedisAddr};
use pow_shield_core::store::refusals::{opened_block, refusal_key, Batches};
use pow_shield_core::store::{Checked, Offence, Op, Reply, Solution, Spendable, Struck, Subject};

mod coalesce;
mod outage;
mod refusals;

use coalesce::Group;
use refusals::{BatchContext, BatchTimer};

/// Spends kept per worker for Redis: an outage of minutes at a high solve
/// rate. Beyond it a token is dropped (counted, logged once): the node that
/// spent it still refuses it; only other nodes could accept it once more.
const MAX_REPLAYS: usize = 4096;

/// Queued spends written per request or reconnect: well under the
/// client's cap of commands in flight, so the writes never crowd out the
/// requests' own commands after an outage.
const REPLAY_BATCH: usize = 64;

/// How often a worker that issues challenges reads the generation again.
const GENERATION_EVERY_MS: u64 = 1_000;

/// The Redis store of one worker.
pub struct RedisStore {
    router: Router,
    prefix: String,
    window_sha: String,
    approx_sha: String,
    stacked_sha: String,
    strike_sha: String,
    spend_sha: String,
    batch_sha: String,
    /// What the refusals this store learns are about (`refusals::scope`).
    scope: u64,
    /// A Redis Cluster: a spent record lives in its client's slot, so that
    /// the spend script can take back the client's strike in one call; the
    /// data generation is the slot's, answered by the check scripts and
    /// checked by the spend (`generation::in_slot_generation`).
    cluster: bool,
    /// Makes sorted-set members unique across nodes and workers.
    node_id: u64,
    pid: u32,
    seq: Cell<u64>,
    /// The node's replay cache (the shared zone), where the `local`
    /// fallback spends tokens while Redis is unavailable.
    local: Option<ShmStore>,
    /// Redis's data generation, once read (`generation`), and the value
    /// of `<prefix>gen` it came from.
    generation: Cell<Option<u64>>,
    generation_value: RefCell<Vec<u8>>,
    gen_key: String,
    gen_sha: String,
    gen_spend_sha: String,
    asking_generation: Cell<bool>,
    /// When the generation was last asked for (monotonic ms).
    generation_asked_ms: Cell<u64>,
    /// This node's own generation (challenges issued during an outage).
    local_generation: u64,
    /// A Redis Cluster: the generation each slot's refusals last came with
    /// (0: not known), for the challenges this worker refuses locally.
    slot_generations: RefCell<Vec<u64>>,
    /// Spends Redis could not take, to write when it answers again.
    replays: RefCell<Replays>,
    /// Refusals decided here (the zone's refusal cache), each client's to
    /// send to Redis in one call (`refusals.rs`).
    batches: RefCell<Batches<BatchContext>>,
    batch_timer: BatchTimer,
    /// Since when the worker, exiting, waits for Redis to take its batches.
    exiting_since: Cell<Option<u64>>,
    /// The checks on their way to Redis that later requests of the same
    /// client join (coalesce.rs).
    groups: RefCell<std::collections::HashMap<Vec<u8>, Group>>,
    /// A connection was ready before: the next one follows an outage.
    connected_once: Cell<bool>,

    log: *mut ngx_log_t,
    me: Weak<RedisStore>,
}

impl RedisStore {
    /// Connects (without waiting) and returns the store.
    pub fn start(
        conf: &RedisConf,
        local: Option<ShmStore>,
        log: *mut ngx_log_t,
    ) -> Option<Rc<Self>> {
        let mut handshake = Vec::new();
        let target = &conf.target;
        if let Some(password) = target.password.as_ref() {
            let mut auth = Vec::new();
            match target.username.as_deref() {
                Some(user) if !user.is_empty() => {
                    encode(&mut auth, &[b"AUTH", user.as_bytes(), password.as_bytes()])
                }
                _ => encode(&mut auth, &[b"AUTH", password.as_bytes()]),
            }
            handshake.push(("AUTH", auth));
        }
        if target.db != 0 {
            let mut select = Vec::new();
            encode(&mut select, &[b"SELECT", target.db.to_string().as_bytes()]);
            handshake.push(("SELECT", select));
        }
        let generation_scripts = match conf.options.cluster {
            true => [
                &**generation::SLOT_WINDOW_SCRIPT,
                &**generation::SLOT_APPROX_SCRIPT,
                &**generation::SLOT_STACKED_SCRIPT,
                &**generation::SLOT_GEN_SPEND_SCRIPT,
            ]
            .to_vec(),
            false => [
                generation::GENERATION_SCRIPT,
                &**generation::GEN_SPEND_SCRIPT,
            ]
            .to_vec(),
        };
        for script in [
            scripts::SLIDING_WINDOW_SCRIPT,
            scripts::APPROX_SCRIPT,
            stacked::STACKED_SCRIPT,
            scripts::STRIKE_SCRIPT,
            scripts::SPEND_SCRIPT,
            scripts::BATCH_SCRIPT,
        ]
        .iter()
        .chain(&generation_scripts)
        {
            let mut load = Vec::new();
            encode(&mut load, &[b"SCRIPT", b"LOAD", script.as_bytes()]);
            handshake.push(("SCRIPT LOAD", load));
        }

        let tls = match tls_name(target, &conf.options) {
            Some(name) if !conf.ssl.is_null() => Some(Tls {
                ssl: conf.ssl,
                name: PeerName::new(name)?,
                verify: conf.options.tls.verify,
            }),
            _ => None,
        };

        let mut node = [0u8; 8];
        getrandom::getrandom(&mut node).ok()?;
        Some(Rc::new_cyclic(|me: &Weak<Self>| {
            let ready = me.clone();
            let on_ready = move || {
                if let Some(store) = ready.upgrade() {
                    store.ask_generation();
                    // The spends the fallback made first, then the refusals
                    // counted before the outage: the spends take back the
                    // strikes Redis holds, and the batch's strikes never
                    // meet those Redis would have taken back already (a
                    // paying client's breaker must not open in between).
                    store.write_replays();
                    store.on_connected();
                }
            };
            let tls_template = (!conf.ssl.is_null()).then(|| {
                (
                    conf.ssl,
                    conf.options.tls.name.clone(),
                    conf.options.tls.verify,
                )
            });
            let router = if let Some(sentinels) = &target.sentinel {
                let mut sentinel_handshake = Vec::new();
                if let Some(password) = &conf.options.sentinel_password {
                    let mut auth = Vec::new();
                    encode(&mut auth, &[b"AUTH", password.0.as_bytes()]);
                    sentinel_handshake.push(("AUTH", auth));
                }
                let template = SentinelTemplate {
                    master_name: sentinels.master.clone(),
                    timeout_ms: conf.options.timeout_ms as usize,
                    connect_timeout_ms: conf.options.connect_timeout_ms as usize,
                    handshake,
                    sentinel_handshake,
                    on_ready: Rc::new(on_ready),
                    tls: tls_template,
                    resolver: conf.resolver,
                };
                Router::Sentinel(Sentinel::start(template, seeds(conf), log))
            } else if conf.options.cluster {
                let template = NodeTemplate {
                    timeout_ms: conf.options.timeout_ms as usize,
                    connect_timeout_ms: conf.options.connect_timeout_ms as usize,
                    handshake,
                    on_ready: Rc::new(on_ready),
                    tls: tls_template,
                    resolver: conf.resolver,
                };
                Router::Cluster(Cluster::start(template, seeds(conf), log))
            } else {
                let settings = Settings {
                    addr: conf.addr,
                    name: conf.display.clone(),
                    timeout_ms: conf.options.timeout_ms as usize,
                    connect_timeout_ms: conf.options.connect_timeout_ms as usize,
                    handshake,
                    on_ready: Some(Box::new(on_ready)),
                    tls,
                    cluster: false,
                    on_push: None,
                    resolve: match &target.addr {
                        RedisAddr::Tcp { host, port } => {
                            NameResolver::for_host(conf.resolver, host, *port)
                        }
                        RedisAddr::Unix { .. } => None,
                    },
                    outage: None,
                };
                Router::Single(Client::start(settings, log))
            };
            let check = check_scripts(conf.options.cluster);
            Self {
                router,
                prefix: conf.options.prefix.clone(),
                window_sha: scripts::script_sha1(check[0]),
                approx_sha: scripts::script_sha1(check[1]),
                stacked_sha: scripts::script_sha1(check[2]),
                strike_sha: scripts::script_sha1(scripts::STRIKE_SCRIPT),
                spend_sha: scripts::script_sha1(scripts::SPEND_SCRIPT),
                batch_sha: scripts::script_sha1(scripts::BATCH_SCRIPT),
                scope: pow_shield_core::store::refusals::scope(&[
                    conf.display.as_bytes(),
                    &target.db.to_le_bytes(),
                    conf.options.prefix.as_bytes(),
                ]),
                cluster: conf.options.cluster,
                node_id: u64::from_le_bytes(node),
                pid: std::process::id(),
                seq: Cell::new(0),
                local_generation: local
                    .as_ref()
                    .map_or(u64::from_le_bytes(node) >> 11, ShmStore::zone_id),
                local,
                generation: Cell::new(None),
                generation_value: RefCell::new(Vec::new()),
                gen_key: format!("{}gen", conf.options.prefix),
                gen_sha: scripts::script_sha1(generation::GENERATION_SCRIPT),
                gen_spend_sha: scripts::script_sha1(match conf.options.cluster {
                    true => &generation::SLOT_GEN_SPEND_SCRIPT,
                    false => &generation::GEN_SPEND_SCRIPT,
                }),
                asking_generation: Cell::new(false),
                generation_asked_ms: Cell::new(0),
                slot_generations: RefCell::new(match conf.options.cluster {
                    true => vec![0; SLOTS],
                    false => Vec::new(),
                }),
                replays: RefCell::new(Replays::new(MAX_REPLAYS)),
                batches: RefCell::new(Batches::default()),
                batch_timer: BatchTimer::new(),
                exiting_since: Cell::new(None),
                connected_once: Cell::new(false),
                groups: RefCell::new(std::collections::HashMap::new()),
                log,
                me: me.clone(),
            }
        }))
        .inspect(|store| store.attach_timer())
    }

    pub fn retry_in_ms(&self) -> Option<u64> {
        self.router.retry_in_ms()
    }

    /// The generation a challenge issued now carries. Another node may
    /// have renewed it (a flush): read again at most once a second, so
    /// that the challenges after this one carry the new one.
    pub fn challenge_generation(&self) -> Option<u64> {
        if monotonic_ms().saturating_sub(self.generation_asked_ms.get()) >= GENERATION_EVERY_MS {
            self.check_generation();
        }
        self.generations().for_challenge()
    }

    /// What this worker knows of the data generations now.
    pub fn generations(&self) -> Generations {
        Generations {
            redis: self.generation.get(),
            local: self.local_generation,
            redis_up: self.router.is_healthy(),
            cluster: self.cluster,
        }
    }

    /// Whether a solution of a challenge issued in `generation` may be
    /// spent now. A generation neither ours nor the one known may be one
    /// another node just renewed (after a flush): read it again.
    /// In a Redis Cluster, a solution of a generation older than the one
    /// this worker last heard for the client's slot is unpaid from the
    /// start (its check strikes, and may be refused here): an old token
    /// replayed must not pass as paid to every check (the spend would
    /// refuse it, but after a check that struck nothing).
    pub fn accepts(&self, generation: Option<u64>, key: &[u8]) -> Spendable {
        let now = self.generations();
        if self.cluster && now.redis_up {
            if let Some(gen) = generation.filter(|gen| *gen != self.local_generation) {
                let slot = generation::slot_of_tag(client_tag(key).as_bytes());
                // (Generations grow with Redis's clock: an older one is the
                // token's age; a newer one is news to this worker, left to
                // the check and the spend.)
                if self.slot_generation(slot).is_some_and(|known| gen < known) {
                    return Spendable::Stale;
                }
            }
        }
        if now.accepts(generation) {
            return Spendable::Now;
        }
        if now.redis_up && generation.is_some() {
            self.ask_generation();
        }
        Spendable::NotNow
    }

    /// Reads the generation key (a plain `GET`): if it is not what this
    /// worker knows (another node renewed it, or it is gone), asks again.
    fn check_generation(&self) {
        if self.cluster || self.asking_generation.get() {
            return;
        }
        self.generation_asked_ms.set(monotonic_ms());
        let mut get = Vec::new();
        encode(&mut get, &[b"GET", self.gen_key.as_bytes()]);
        let me = self.me.clone();
        let _ = self.router.submit(
            self.gen_key.as_bytes(),
            get,
            None,
            Box::new(move |frame: Option<OwnedFrame>| {
                let Some(store) = me.upgrade() else {
                    return;
                };
                let known = store.generation.get().is_some();
                let same = match &frame {
                    Some(OwnedFrame::BulkString(value)) => {
                        *value == *store.generation_value.borrow()
                    }
                    // No answer: nothing learnt.
                    None => return,
                    _ => false,
                };
                if !(same && known) {
                    store.ask_generation();
                }
            }),
        );
    }

    /// Reads (or renews) Redis's data generation: after each handshake and
    /// when a spend found it gone. A Redis Cluster has none.
    fn ask_generation(&self) {
        if self.cluster || self.asking_generation.replace(true) {
            return;
        }
        self.generation_asked_ms.set(monotonic_ms());
        let mut fresh = [0u8; 8];
        if getrandom::getrandom(&mut fresh).is_err() {
            self.asking_generation.set(false);
            return;
        }
        let fresh = (u64::from_le_bytes(fresh) >> 11).to_string();
        let args = |sha_or_script: &str, op: &[u8]| {
            let mut command = Vec::new();
            let parts: [&[u8]; 5] = [
                op,
                sha_or_script.as_bytes(),
                b"1",
                self.gen_key.as_bytes(),
                fresh.as_bytes(),
            ];
            encode(&mut command, &parts);
            command
        };
        let evalsha = args(&self.gen_sha, b"EVALSHA");
        let eval = args(generation::GENERATION_SCRIPT, b"EVAL");
        let rebuild: Rebuild = Rc::new(move || eval.clone());
        let me = self.me.clone();
        let sent = self.router.submit(
            self.gen_key.as_bytes(),
            evalsha,
            Some(rebuild),
            Box::new(move |frame: Option<OwnedFrame>| {
                if let Some(store) = me.upgrade() {
                    store.asking_generation.set(false);
                    if let Some((value, gen)) = frame.as_ref().and_then(generation::from_reply) {
                        store.generation.set(Some(gen));
                        *store.generation_value.borrow_mut() = value;
                    }
                }
            }),
        );
        if sent.is_err() {
            self.asking_generation.set(false);
        }
    }

    pub fn shutdown(&self) {
        self.batch_timer.cancel();
        self.router.shutdown();
    }

    /// The client's strikes and trips keys, as the breaker scripts take
    /// them; `tag` is `client_tag(key)`.
    fn breaker_keys(&self, call: &mut ScriptCall, tag: &[u8]) {
        for which in [ClientKey::Strikes, ClientKey::Trips, ClientKey::Unpaid] {
            call.push(|w| keys::write(w, self.prefix.as_bytes(), tag, which));
        }
    }

    /// Runs a script by SHA, resending it as EVAL if Redis lost it, and
    /// delivers what `on_reply` makes of its integers; a failure (`None`
    /// from `on_reply`, or none of ours) is asked of the fallback then
    /// (`late`). `slot_key` routes it in a Redis Cluster: a key of the
    /// call, or the client's hash tag they all share.
    fn call_script(
        &self,
        script: &'static str,
        slot_key: &[u8],
        call: ScriptCall,
        late: Box<Late>,
        waiter: &mut NewWaiter,
        on_reply: impl FnOnce(Option<Vec<i64>>) -> Option<Reply> + 'static,
    ) -> Poll {
        self.call_script_then(script, slot_key, call, late, waiter, on_reply, || {})
    }

    /// [`Self::call_script`], then `then` once the request has its answer
    /// (the requests that joined it are decided after it).
    #[allow(clippy::too_many_arguments)]
    fn call_script_then(
        &self,
        script: &'static str,
        slot_key: &[u8],
        call: ScriptCall,
        late: Box<Late>,
        waiter: &mut NewWaiter,
        on_reply: impl FnOnce(Option<Vec<i64>>) -> Option<Reply> + 'static,
        then: impl FnOnce() + 'static,
    ) -> Poll {
        self.write_replays();
        let (evalsha, shared) = call.finish();
        // Only built if Redis lost the script (SCRIPT FLUSH, a restart).
        let copy = evalsha.clone();
        let eval: Rebuild = Rc::new(move || script_call::eval(&copy, shared, script));
        let waiter = waiter();
        waiter.keep(late);
        let (held, store) = (waiter.clone(), self.me.clone());
        let on_reply = Box::new(move |frame: Option<OwnedFrame>| {
            match on_reply(frame.as_ref().and_then(integers)) {
                Some(reply) => waiter.deliver(reply),
                None => {
                    let replay = waiter.fall_back(Failure::Down, true);
                    if let (Some(replay), Some(store)) = (replay, store.upgrade()) {
                        store.replay_later(&replay);
                    }
                }
            }
            then();
        });
        match self.router.submit(slot_key, evalsha, Some(eval), on_reply) {
            Ok(()) => Poll::Pending,
            Err(unavailable) => match held.take_late() {
                Some(late) => Poll::Failed(failure(unavailable), late),
                // (Kept above; nothing else takes it.)
                None => Poll::Ready(Reply::Down),
            },
        }
    }

    /// Notes the generation a reply of Redis gave for `slot`.
    fn note_slot_generation(&self, slot: u16, generation: Option<u64>) {
        if let (Some(gen), Ok(mut gens)) = (generation, self.slot_generations.try_borrow_mut()) {
            if let Some(known) = gens.get_mut(usize::from(slot)) {
                *known = gen;
            }
        }
    }

    /// The generation of `slot` this worker last heard of, if any.
    fn slot_generation(&self, slot: u16) -> Option<u64> {
        let gens = self.slot_generations.try_borrow().ok()?;
        gens.get(usize::from(slot)).copied().filter(|gen| *gen != 0)
    }

    fn spent_key(&self, digest: &[u8; 32], key: &[u8]) -> String {
        keys::spent(&self.prefix, digest, key, self.cluster)
    }

    /// A block of `key` this node learnt from Redis and that still holds.
    fn known_block(
        &self,
        key: &[u8],
        rules: BreakerRules,
        monotonic_ms: u64,
    ) -> Option<BreakerStatus> {
        self.local.as_ref()?.blocked(key, rules, monotonic_ms)
    }

    /// What a reply does with a block Redis reports: the zone keeps it for
    /// as long as it lasts.
    fn block_keeper(
        &self,
        key: &[u8],
        rules: BreakerRules,
    ) -> impl FnOnce(BreakerStatus) + 'static {
        let local = self.local.clone();
        let key = (rules.strikes.is_some() || rules.ban.is_some()).then(|| key.to_vec());
        move |breaker| {
            if let (Some(local), Some(key)) = (local, key) {
                local.remember(&key, breaker, rules, monotonic_ms());
            }
        }
    }
}

impl RedisStore {
    /// Asks Redis for `op`; what Redis does not take now comes back with
    /// `late` (`Poll::Failed`), and a failure later is decided through the
    /// waiter, which keeps it (`Waiter::fall_back`).
    pub fn ask(&self, op: Op, subject: &Subject, late: Box<Late>, waiter: &mut NewWaiter) -> Poll {
        match op {
            Op::Check { offence } => match subject.limits.as_slice() {
                // (Stacked limits: all of them, in the same call.)
                [limit, ..] => self.check(subject, *limit, offence, late, waiter),
                // (The decision checks only where a limit is set.)
                [] => Poll::Ready(Reply::Checked(Checked {
                    verdict: Verdict {
                        allowed: true,
                        ..Verdict::default()
                    },
                    ..Checked::default()
                })),
            },
            Op::Spend(solution) => self.spend(subject, solution, late, waiter),
            Op::Forgive(_) => self.forgive(late),
            Op::Strike => self.strike(subject, late, waiter),
        }
    }

    fn check(
        &self,
        subject: &Subject,
        limit: RateLimit,
        offence: Offence,
        late: Box<Late>,
        waiter: &mut NewWaiter,
    ) -> Poll {
        let rules = subject.rules;
        // A block this node learnt from Redis holds without asking again
        // (blocked requests change nothing there): blocking stays cheap.
        if let Some(breaker) = self.known_block(subject.key, rules, monotonic_ms()) {
            return Poll::Ready(Reply::Checked(Checked {
                breaker,
                ..Checked::default()
            }));
        }
        // Stacked limits: all of them in one call of the stacked script,
        // decided in Redis (neither refused locally nor coalesced).
        let cluster = self.cluster;
        if subject.limits.len() > 1 {
            let tag = client_tag(subject.key);
            let seq = self.seq.get().wrapping_add(1);
            self.seq.set(seq);
            let remember = self.block_keeper(subject.key, rules);
            let limits = subject.limits;
            let call = self.stacked_call(subject, offence, tag.as_bytes(), seq);
            let stacked_script = check_scripts(cluster)[2];
            return self.call_script(
                stacked_script,
                tag.as_bytes(),
                call,
                late,
                waiter,
                move |reply| {
                    let reply = reply?;
                    let (reply, generation) = split_generation(cluster, &reply);
                    let (verdict, breaker) =
                        stacked::stacked_verdict_from_reply(reply, &limits).ok()?;
                    remember(breaker);
                    Some(checked(offence, rules, verdict, breaker, generation))
                },
            );
        }
        // Refused by Redis until a moment still ahead: refused here, unless
        // it pays (a spend must be global).
        if offence == Offence::Unpaid {
            if let Some(refused) = self.refuse_locally(subject, limit) {
                return Poll::Ready(Reply::Checked(refused.checked));
            }
        }
        // What this worker counted for the client goes first: Redis decides
        // this request on every strike (the one reaching the threshold is
        // Redis's to count).
        self.send_batch_now(subject);
        let asked_ms = monotonic_ms();
        let refusal = self
            .local
            .is_some()
            .then(|| refusal_key(self.scope, limit, subject.approx, subject.key));
        // A request of a client whose check is on its way joins it: the
        // call's answer decides it (coalesce.rs).
        let coalesce = offence == Offence::Unpaid && !subject.approx;
        let late = match (&refusal, coalesce) {
            (Some(refusal), true) => {
                match self.join(refusal, rules, subject.rising, late, waiter) {
                    Ok(()) => return Poll::Pending,
                    Err(late) => late,
                }
            }
            _ => late,
        };
        let store = self.me.clone();
        let tag = client_tag(subject.key);
        let remember = self.block_keeper(subject.key, rules);
        let (script, call) =
            self.window_call(tag.as_bytes(), limit, subject.approx, offence, rules, 1);
        let slot = generation::slot_of_tag(tag.as_bytes());
        let group = refusal.clone().filter(|_| coalesce);
        let opened = group.clone();
        let owned_key = subject.key.to_vec();
        // The tag alone hashes to the slot of every `{tag}` key (it holds no
        // braces: hex, or `#` and hex).
        let answered = Rc::new(Cell::new(false));
        let (was_answered, releaser) = (answered.clone(), store.clone());
        // The requests that joined this one are decided once it has its
        // answer (the fallback's too, in arrival order).
        let release = move || {
            if let (Some(group), Some(store)) = (&group, releaser.upgrade()) {
                store.release(group, &owned_key, limit, rules, was_answered.get());
            }
        };
        let on_reply = move |reply: Option<Vec<i64>>| {
            let reply = reply?;
            // A Redis Cluster's refusal answers the slot's generation too.
            let (reply, generation) = split_generation(cluster, &reply);
            let decided = scripts::verdict_from_reply(reply, limit).ok();
            answered.set(decided.is_some());
            let store = store.upgrade();
            if let Some(store) = &store {
                store.note_slot_generation(slot, generation);
            }
            if let Some((verdict, breaker)) = decided {
                // The strike that opened the breaker: the next request is
                // blocked here, not refused once more.
                let keep = opened_block(&breaker, rules).unwrap_or(breaker);
                remember(keep);
                if let (Some(refusal), Some(store)) = (&refusal, &store) {
                    match (verdict.allowed, keep.block) {
                        (false, Block::Clear) => {
                            store.learn_refusal(refusal, &verdict, &breaker, asked_ms)
                        }
                        (_, Block::Clear) => {}
                        // Once the block ends Redis decides again.
                        _ => store.forget_refusal(refusal),
                    }
                }
            }
            let (verdict, breaker) = decided?;
            // The script strikes a refused offence of an unblocked client.
            let struck = offence != Offence::None
                && !verdict.allowed
                && breaker.block == Block::Clear
                && rules.strikes.is_some();
            Some(Reply::Checked(Checked {
                verdict,
                breaker,
                struck,
                generation,
                maybe_struck: false,
            }))
        };
        let poll = self.call_script_then(
            script,
            tag.as_bytes(),
            call,
            late,
            waiter,
            on_reply,
            release,
        );
        if let (Poll::Pending, Some(refusal)) = (&poll, &opened) {
            self.open_group(refusal, rules, subject.rising);
        }
        poll
    }

    /// The window script's call for `k` requests of one client.
    fn window_call(
        &self,
        tag: &[u8],
        limit: RateLimit,
        approx: bool,
        offence: Offence,
        rules: BreakerRules,
        k: u32,
    ) -> (&'static str, ScriptCall) {
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        let prefix = self.prefix.as_bytes();
        // Written in place (keys::write): one call per shielded request.
        let key = |which| move |w: &mut Vec<u8>| keys::write(w, prefix, tag, which);
        let [threshold, ttl, after, ban] = scripts::rules(rules);
        // The exact log (a sorted set) or the counter (a hash).
        let cluster = self.cluster;
        let [window_script, approx_script, _] = check_scripts(cluster);
        let (script, sha, counted) = if approx {
            (approx_script, &self.approx_sha, ClientKey::Approx(limit))
        } else {
            (window_script, &self.window_sha, ClientKey::Window(limit))
        };
        let mut call = ScriptCall::new(sha, 5 + usize::from(cluster), if k > 1 { 9 } else { 8 });
        call.push(key(counted))
            .push(key(ClientKey::Refused(limit)))
            .push(key(ClientKey::Strikes))
            .push(key(ClientKey::Trips))
            .push(key(ClientKey::Unpaid));
        if cluster {
            call.push(|w| generation::write_slot_key(w, prefix, generation::slot_of_tag(tag)));
        }
        call.num(limit.requests.into())
            .num(limit.window_ms)
            .push(|w| scripts::write_member(w, self.node_id, self.pid, seq))
            .num(scripts::offence(offence))
            .num(threshold)
            .num(ttl)
            .num(after)
            .num(ban);
        if k > 1 {
            call.num(k.into());
        }
        (script, call)
    }

    /// The call of the stacked script (`stacked::STACKED_SCRIPT`): every
    /// limit of the location in one round trip.
    fn stacked_call(
        &self,
        subject: &Subject,
        offence: Offence,
        tag: &[u8],
        seq: u64,
    ) -> ScriptCall {
        let prefix = self.prefix.as_bytes();
        let key = |which| move |w: &mut Vec<u8>| keys::write(w, prefix, tag, which);
        let limits = subject.limits.as_slice();
        let n = limits.len();
        let slot_key = usize::from(self.cluster);
        let mut call = ScriptCall::new(&self.stacked_sha, 3 + 2 * n + slot_key, 7 + 2 * n);
        self.breaker_keys(&mut call, tag);
        for &limit in limits {
            let counted = if subject.approx {
                ClientKey::Approx(limit)
            } else {
                ClientKey::Window(limit)
            };
            call.push(key(counted)).push(key(ClientKey::Refused(limit)));
        }
        if self.cluster {
            call.push(|w| generation::write_slot_key(w, prefix, generation::slot_of_tag(tag)));
        }
        call.push(|w| scripts::write_member(w, self.node_id, self.pid, seq))
            .num(scripts::offence(offence));
        for rule in scripts::rules(subject.rules) {
            call.num(rule);
        }
        call.num(u64::from(subject.approx));
        for limit in limits {
            call.num(limit.requests.into()).num(limit.window_ms);
        }
        call
    }

    fn strike(&self, subject: &Subject, late: Box<Late>, waiter: &mut NewWaiter) -> Poll {
        let (key, rules) = (subject.key, subject.rules);
        if let Some(breaker) = self.known_block(key, rules, monotonic_ms()) {
            return Poll::Ready(Reply::Struck(Struck {
                breaker,
                struck: false,
            }));
        }
        let tag = client_tag(key);
        let remember = self.block_keeper(key, rules);
        let refusal = single_limit(subject)
            .filter(|_| self.local.is_some())
            .map(|limit| refusal_key(self.scope, limit, subject.approx, key));
        let store = self.me.clone();
        let mut call = ScriptCall::new(&self.strike_sha, 3, 4);
        self.breaker_keys(&mut call, tag.as_bytes());
        for rule in scripts::rules(rules) {
            call.num(rule);
        }
        self.call_script(
            scripts::STRIKE_SCRIPT,
            tag.as_bytes(),
            call,
            late,
            waiter,
            move |reply| {
                let breaker = scripts::standing_from_reply(&reply?).ok()?;
                // The strike that opened the breaker: blocked here from the
                // next request on (not refused once more).
                let keep = opened_block(&breaker, rules).unwrap_or(breaker);
                remember(keep);
                if let (Some(refusal), Some(store), false) =
                    (&refusal, store.upgrade(), keep.block == Block::Clear)
                {
                    store.forget_refusal(refusal);
                }
                // The script strikes unless the client is blocked.
                let struck = breaker.block == Block::Clear && rules.strikes.is_some();
                Some(Reply::Struck(Struck { breaker, struck }))
            },
        )
    }

    fn spend(
        &self,
        subject: &Subject,
        solution: Solution,
        late: Box<Late>,
        waiter: &mut NewWaiter,
    ) -> Poll {
        let (digest, expires_at_ms, now_ms) = (solution.digest, solution.spent_until_ms, now_ms());
        let spent_key = self.spent_key(&digest, subject.key);
        let tag = client_tag(subject.key);
        // Spent here already (while Redis was down or busy): a replay, and
        // nothing to take back; Redis learns of it from the queue.
        if self.spent_locally(&digest, now_ms) {
            self.queue_replay(&digest, spent_key, tag, expires_at_ms);
            return Poll::Ready(Reply::Spent(Spent::Replayed));
        }
        // The strikes this worker counted for the client go first: the
        // spend takes one of them back.
        self.send_batch_now(subject);
        let refusal = single_limit(subject)
            .filter(|_| self.local.is_some())
            .map(|limit| refusal_key(self.scope, limit, subject.approx, subject.key));
        let remember = self.block_keeper(subject.key, subject.rules);
        let forgive = (subject.key.to_vec(), subject.rules);
        // Within Redis's generation (a Redis Cluster: the slot's),
        // atomically; a challenge issued here during an outage is spent as
        // before: the zone has its spend.
        let in_generation = self.generations().spent_in(solution.generation);
        let gen_spend: &'static str = match self.cluster {
            true => &generation::SLOT_GEN_SPEND_SCRIPT,
            false => &generation::GEN_SPEND_SCRIPT,
        };
        let (script, sha, args): (&'static str, _, _) = match in_generation {
            Some(_) => (gen_spend, &self.gen_spend_sha, 7),
            None => (scripts::SPEND_SCRIPT, &self.spend_sha, 6),
        };
        // KEYS[5] the generation (or, unused, the paid key again: one slot),
        // KEYS[6] the spends waiting for their 429's strike.
        let mut call = ScriptCall::new(sha, 6, args);
        call.push(|w| w.extend_from_slice(spent_key.as_bytes()));
        self.breaker_keys(&mut call, tag.as_bytes());
        let paid = |w: &mut Vec<u8>| {
            keys::write(w, self.prefix.as_bytes(), tag.as_bytes(), ClientKey::Paid)
        };
        match in_generation {
            // A Redis Cluster: the generation of the client's slot.
            Some(_) if self.cluster => call.push(|w| {
                let slot = generation::slot_of_tag(tag.as_bytes());
                generation::write_slot_key(w, self.prefix.as_bytes(), slot);
            }),
            Some(_) => call.push(|w| w.extend_from_slice(self.gen_key.as_bytes())),
            None => call.push(paid),
        };
        call.push(paid);
        call.num(expires_at_ms.saturating_sub(now_ms).max(1));
        for rule in scripts::rules(subject.rules) {
            call.num(rule);
        }
        call.num(scripts::spend_mode(false, solution.forgive));
        if let Some(gen) = in_generation {
            call.num(gen);
        }
        let store = self.me.clone();
        let slot = generation::slot_of_tag(tag.as_bytes());
        self.call_script(
            script,
            spent_key.as_bytes(),
            call,
            late,
            waiter,
            move |reply| {
                let store = store.upgrade();
                if let Some(stale) = reply.as_deref().filter(|r| generation::is_stale(r)) {
                    let renewed = generation::stale_generation(stale);
                    // The generation is gone (a flush, a failover): what
                    // was spent in it is unknown, so this is not accepted
                    // (409 with a fresh challenge); the next challenges
                    // carry the new generation (a slot's is in the reply).
                    match store {
                        Some(store) if store.cluster => store.note_slot_generation(slot, renewed),
                        Some(store) => {
                            store.generation.set(None);
                            store.ask_generation();
                        }
                        None => {}
                    }
                    return Some(Reply::Spent(Spent::Stale(renewed)));
                }
                let spent = reply.and_then(|r| scripts::spent_from_reply(&r).ok())?;
                Some(Reply::Spent(match spent {
                    // First in Redis, but maybe spent here while Redis was
                    // down (and not written to it yet, or dropped from the
                    // queue).
                    Spent::Accepted(breaker) => {
                        if let (Some(local), Some(refusal)) =
                            (store.as_ref().and_then(|s| s.local.as_ref()), &refusal)
                        {
                            local.refusal_forgiven(refusal, breaker.strikes);
                        }
                        let (key, rules) = &forgive;
                        let first = store.is_none_or(|s| {
                            s.record_locally(&digest, expires_at_ms, now_ms, key, *rules)
                        });
                        match first {
                            true => Spent::Accepted(breaker),
                            false => Spent::Replayed,
                        }
                    }
                    Spent::Blocked(breaker) => {
                        remember(breaker);
                        Spent::Blocked(breaker)
                    }
                    spent @ (Spent::Replayed | Spent::Stale(_) | Spent::Unavailable) => spent,
                }))
            },
        )
    }
}

impl RedisStore {
    /// A solution of Redis's generation while Redis is unavailable: the
    /// fallback rule may have the zone record it, to be written to Redis
    /// (`replay_later`), whose write takes back its 429's strike there.
    /// While Redis answers, nothing (the fresh challenge pays it back).
    fn forgive(&self, late: Box<Late>) -> Poll {
        if self.router.is_healthy() || self.local.is_none() {
            return Poll::Ready(Reply::Spent(Spent::Unavailable));
        }
        Poll::Failed(Failure::Down, late)
    }

    /// The zone spent (or recorded) a token for Redis: written to Redis
    /// once it takes commands again.
    pub fn replay_later(&self, replay: &Replay) {
        let digest = &replay.solution.digest;
        let spent_key = self.spent_key(digest, &replay.key);
        let tag = client_tag(&replay.key);
        self.queue_replay(digest, spent_key, tag, replay.solution.spent_until_ms);
    }
}

/// Why the router did not take a call.
fn failure(unavailable: Unavailable) -> Failure {
    match unavailable {
        Unavailable::Down => Failure::Down,
        Unavailable::Busy => Failure::Busy,
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        self.batch_timer.cancel();
    }
}

/// The location's one limit; `None` without a limit or with stacked limits
/// (those are decided in Redis: neither refused locally nor coalesced).
fn single_limit(subject: &Subject) -> Option<RateLimit> {
    match subject.limits.as_slice() {
        [limit] => Some(*limit),
        _ => None,
    }
}

/// `limit` alone, as a subject's limits.
fn one_limit(limit: RateLimit) -> Limits {
    let mut limits = Limits::default();
    // (One limit always fits.)
    let _ = limits.push(limit, None);
    limits
}

/// A check's answer from Redis: the scripts strike a refused offence of an
/// unblocked client.
fn checked(
    offence: Offence,
    rules: BreakerRules,
    verdict: Verdict,
    breaker: BreakerStatus,
    generation: Option<u64>,
) -> Reply {
    let struck = offence != Offence::None
        && !verdict.allowed
        && breaker.block == Block::Clear
        && rules.strikes.is_some();
    Reply::Checked(Checked {
        verdict,
        breaker,
        struck,
        generation,
        maybe_struck: false,
    })
}

/// A check's reply, and the slot's generation a Redis Cluster's answers
/// last.
fn split_generation(cluster: bool, reply: &[i64]) -> (&[i64], Option<u64>) {
    match cluster {
        true => generation::split_slot_generation(reply),
        false => (reply, None),
    }
}

/// The check scripts (window, approx, stacked): a Redis Cluster's answer
/// the slot's generation too.
fn check_scripts(cluster: bool) -> [&'static str; 3] {
    match cluster {
        true => [
            &generation::SLOT_WINDOW_SCRIPT,
            &generation::SLOT_APPROX_SCRIPT,
            &generation::SLOT_STACKED_SCRIPT,
        ],
        false => [
            scripts::SLIDING_WINDOW_SCRIPT,
            scripts::APPROX_SCRIPT,
            stacked::STACKED_SCRIPT,
        ],
    }
}

/// The configured nodes (a cluster's seeds, the sentinels), resolved.
fn seeds(conf: &RedisConf) -> Vec<Seed> {
    conf.seeds
        .iter()
        .map(|(node, addr)| Seed {
            node: node.clone(),
            addr: *addr,
        })
        .collect()
}

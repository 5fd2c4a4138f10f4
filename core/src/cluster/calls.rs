//! What cluster mode sends Redis for each operation, and what its answers
//! mean (docs/operations.md, "Sizing Redis"): an operation and its subject
//! become one script call (keys, arguments, the script of this mode), and
//! the script's integers become the store's [`Reply`]. The module sends
//! the calls on nginx's event loop; everything here is plain data.

use super::refusals::Sending;
use super::scripts::args;
use super::scripts::replies;
use super::scripts::{Script, Scripts};
use crate::cluster::generation;
use crate::cluster::keys::{self, ClientKey};
use crate::limiter::breaker::BreakerRules;
use crate::limiter::{Limits, RateLimit, MAX_LIMITS};
use crate::redis::command::encode;
use crate::redis::pipeline::CLOCK_STEP;
use crate::redis::script_call::{self, ScriptCall};
use crate::redis::url::RedisTarget;
use crate::store::take_back::{strike_back, Case};
use crate::store::Spent;
use crate::store::{Checked, Counted, Offence, Reply, Solution, Subject};

mod checks;
pub use checks::{checks_reply, CheckOf, MAX_GATHERED};

/// One script call, ready to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// `EVALSHA …`.
    pub evalsha: Vec<u8>,
    /// Where the part `EVAL` shares starts.
    shared: usize,
    /// The script, sent as `EVAL` if Redis lost it (SCRIPT FLUSH, a
    /// restart).
    pub script: &'static str,
}

impl Call {
    fn of(script: &'static Script, call: ScriptCall) -> Self {
        let (evalsha, shared) = call.finish();
        Call {
            evalsha,
            shared,
            script: script.text,
        }
    }

    /// The same call as `EVAL <script>`.
    pub fn eval(&self) -> Vec<u8> {
        script_call::eval(&self.evalsha, self.shared, self.script)
    }
}

/// One call of a Redis Cluster's check of limits in several slots
/// ([`Calls::stacked_parts`]).
#[derive(Clone, Debug)]
pub struct Part {
    /// A hash tag of its keys, which routes its call.
    pub route: Vec<u8>,
    /// Its limits, and each one's place among the location's.
    pub limits: Limits,
    pub at: [u8; MAX_LIMITS],
    /// Each count's hash tag, limit and whether it is a counter
    /// (`approx`): what an undo takes back.
    counts: Vec<(String, RateLimit, bool)>,
    /// Its breaker rules and what a refusal is there (the client's part
    /// only: the others strike no one).
    pub rules: BreakerRules,
    pub offence: Offence,
}

/// The hash tag of a count: the client's, or its `key=` value's.
fn count_tag(tag: &[u8], whose: Counted) -> String {
    match whose {
        // (a spent record's share is counted by table stores only)
        Counted::Client(_) | Counted::Spends(_) => String::from_utf8_lossy(tag).into_owned(),
        Counted::Own(value) => keys::own_tag(value),
    }
}

/// What a client's batch of local refusals is about (the batch script
/// takes several clients' at once on one Redis).
#[derive(Clone, Copy, Debug)]
pub struct BatchOf<'a> {
    pub tag: &'a [u8],
    pub limit: RateLimit,
    pub rules: BreakerRules,
    pub sending: Sending,
}

/// Builds a worker's calls: its key prefix, its name in the sorted sets'
/// members, and the scripts of its mode (one Redis or a Redis Cluster,
/// `Scripts::for_mode`).
#[derive(Clone, Debug)]
pub struct Calls {
    prefix: String,
    gen_key: String,
    node_id: u64,
    pid: u32,
    cluster: bool,
    scripts: &'static Scripts,
}

impl Calls {
    pub fn new(prefix: &str, node_id: u64, pid: u32, cluster: bool) -> Self {
        Calls {
            prefix: prefix.to_owned(),
            gen_key: format!("{prefix}gen"),
            node_id,
            pid,
            cluster,
            scripts: Scripts::for_mode(cluster),
        }
    }

    /// Every script this mode runs, for `SCRIPT LOAD` in the handshake.
    pub fn scripts(&self) -> impl Iterator<Item = &'static str> {
        self.scripts.iter().map(|script| script.text)
    }

    /// What every connection to `target` sends first, each command named:
    /// `AUTH` (with a password), `SELECT` (a database other than 0), every
    /// script of the mode loaded, and Redis's clock last: a call's deadline
    /// is stamped in it (`redis::clock`).
    pub fn handshake(&self, target: &RedisTarget) -> Vec<(&'static str, Vec<u8>)> {
        let mut handshake = Vec::new();
        let mut push = |name, words: &[&[u8]]| {
            let mut command = Vec::new();
            encode(&mut command, words);
            handshake.push((name, command));
        };
        if let Some(password) = target.password.as_ref() {
            match target.username.as_deref() {
                Some(user) if !user.is_empty() => {
                    push("AUTH", &[b"AUTH", user.as_bytes(), password.as_bytes()])
                }
                _ => push("AUTH", &[b"AUTH", password.as_bytes()]),
            }
        }
        if target.db != 0 {
            push("SELECT", &[b"SELECT", target.db.to_string().as_bytes()]);
        }
        for script in self.scripts() {
            push("SCRIPT LOAD", &[b"SCRIPT", b"LOAD", script.as_bytes()]);
        }
        push(CLOCK_STEP, &[b"TIME"]);
        handshake
    }

    /// Whether these are a Redis Cluster's calls.
    pub fn cluster(&self) -> bool {
        self.cluster
    }

    /// The prefix of every key (`pow_shield_redis ... prefix=`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The single Redis's generation key.
    pub fn gen_key(&self) -> &str {
        &self.gen_key
    }

    /// The key of a spent record (a Redis Cluster: in the client's slot).
    pub fn spent_key(&self, digest: &[u8; 32], key: &[u8]) -> String {
        keys::spent(&self.prefix, digest, key, self.cluster)
    }

    /// The client's strikes, trips and unpaid keys, as the breaker parts of
    /// every script take them.
    fn breaker_keys(&self, call: &mut ScriptCall, tag: &[u8]) {
        for which in [ClientKey::Strikes, ClientKey::Trips, ClientKey::Unpaid] {
            call.push(|w| keys::write(w, self.prefix.as_bytes(), tag, which));
        }
    }

    /// A Redis Cluster's check scripts take the slot's generation key last.
    fn slot_key(&self, call: &mut ScriptCall, tag: &[u8]) {
        if self.cluster {
            let slot = generation::slot_of_tag(tag);
            call.push(|w| generation::write_slot_key(w, self.prefix.as_bytes(), slot));
        }
    }

    /// The check of `k` requests of one client (`tag`, its hash tag) under
    /// the subject's limits: one limit's window or approximate counter
    /// (`k` > 1: a coalesced burst), or every limit in the stacked script.
    /// `seq` makes the sorted sets' member unique.
    pub fn check(&self, tag: &[u8], subject: &Subject, offence: Offence, k: u32, seq: u64) -> Call {
        match single_limit(subject) {
            Some(limit) => self.window_check(tag, limit, subject, offence, k, seq),
            None => self.stacked_check(tag, subject, offence, seq),
        }
    }

    fn window_check(
        &self,
        tag: &[u8],
        limit: RateLimit,
        subject: &Subject,
        offence: Offence,
        k: u32,
        seq: u64,
    ) -> Call {
        let prefix = self.prefix.as_bytes();
        // Written in place (keys::write): one call per shielded request.
        let key = |which| move |w: &mut Vec<u8>| keys::write(w, prefix, tag, which);
        // The exact log (a sorted set) or the counter (a hash).
        // (the location's one limit)
        let approx = subject.limits.approx(0);
        let script = self.scripts.check(approx);
        let counted = match approx {
            true => ClientKey::Approx(limit),
            false => ClientKey::Window(limit),
        };
        let mut call = ScriptCall::new(&script.sha1, 5 + usize::from(self.cluster), 10);
        call.push(key(counted)).push(key(ClientKey::Refused(limit)));
        self.breaker_keys(&mut call, tag);
        self.slot_key(&mut call, tag);
        call.num(limit.requests.into())
            .num(limit.window_ms)
            .push(|w| args::write_member(w, self.node_id, self.pid, seq))
            .num(args::offence(offence));
        for rule in args::rules(subject.rules) {
            call.num(rule);
        }
        call.num(k.into()).deadline();
        Call::of(script, call)
    }

    /// Every limit the request is counted by in one call, each under its
    /// count's hash tag: the client's, or its `key=` value's (one Redis:
    /// keys of several tags in one script; a Redis Cluster: one call per
    /// slot, [`Calls::stacked_parts`]).
    fn stacked_check(&self, tag: &[u8], subject: &Subject, offence: Offence, seq: u64) -> Call {
        let (counted, n) = subject.counted_limits();
        let part = (tag, subject.rules, offence);
        self.stacked_call(part, tag, subject.limits, &counted[..n], seq)
    }

    /// The stacked script for `counted` (all in one slot; each with its
    /// place among `limits`, which says how it counts), with the breaker
    /// of `breaker_tag` under `rules`, a refusal being `offence`.
    fn stacked_call(
        &self,
        (breaker_tag, rules, offence): (&[u8], BreakerRules, Offence),
        tag: &[u8],
        limits: &Limits,
        counted: &[(usize, RateLimit, Counted)],
        seq: u64,
    ) -> Call {
        let prefix = self.prefix.as_bytes();
        let n = counted.len();
        let keys = 3 + 2 * n + usize::from(self.cluster);
        let script = &self.scripts.stacked;
        let mut call = ScriptCall::new(&script.sha1, keys, 9 + 2 * n);
        self.breaker_keys(&mut call, breaker_tag);
        for &(at, limit, whose) in counted {
            let own = count_tag(tag, whose);
            let own = own.as_bytes();
            let key = |which| move |w: &mut Vec<u8>| keys::write(w, prefix, own, which);
            let counted = match limits.approx(at) {
                true => ClientKey::Approx(limit),
                false => ClientKey::Window(limit),
            };
            call.push(key(counted)).push(key(ClientKey::Refused(limit)));
        }
        self.slot_key(&mut call, breaker_tag);
        call.push(|w| args::write_member(w, self.node_id, self.pid, seq))
            .num(args::offence(offence));
        for rule in args::rules(rules) {
            call.num(rule);
        }
        call.push(|w| args::write_approx(w, counted.iter().map(|(at, _, _)| limits.approx(*at))));
        call.push(|w| args::write_own(w, counted.iter().map(|(_, _, whose)| *whose)));
        for (_, limit, _) in counted {
            call.num(limit.requests.into()).num(limit.window_ms);
        }
        call.deadline();
        Call::of(script, call)
    }

    /// A Redis Cluster's check of stacked limits whose counts lie in
    /// several slots: one stacked call per slot, the client's first (its
    /// breaker, its own limits, and any `key=` count in its slot; strikes
    /// only there), then one per other slot (no breaker: a `key=` limit's
    /// refusal strikes no one). Each counts the request under its limits
    /// if all of them have room; the request is admitted when every call
    /// admits, and what the others counted is taken back ([`Calls::undo`])
    /// when one refuses.
    pub fn stacked_parts(
        &self,
        tag: &[u8],
        subject: &Subject,
        offence: Offence,
        seq: u64,
    ) -> Vec<(Part, Call)> {
        let (counted, n) = subject.counted_limits();
        let client_slot = generation::slot_of_tag(tag);
        // (slot, the route, its limits)
        type Group<'a> = (u16, Vec<u8>, Vec<(usize, RateLimit, Counted<'a>)>);
        let mut parts: Vec<Group> = vec![(client_slot, tag.to_vec(), Vec::new())];
        for &(at, limit, whose) in &counted[..n] {
            let own = count_tag(tag, whose);
            let slot = generation::slot_of_tag(own.as_bytes());
            match parts.iter_mut().find(|(s, _, _)| *s == slot) {
                Some((_, _, limits)) => limits.push((at, limit, whose)),
                None => parts.push((slot, own.into_bytes(), vec![(at, limit, whose)])),
            }
        }
        let none = BreakerRules {
            strikes: None,
            ban: None,
        };
        parts
            .into_iter()
            .enumerate()
            .map(|(i, (_, route, limits))| {
                // The others strike no one (no rules); the request's offence
                // still says whether the next challenge is priced from a
                // count that has room (a paid request's).
                let rules = match i {
                    0 => subject.rules,
                    _ => none,
                };
                let call =
                    self.stacked_call((&route, rules, offence), tag, subject.limits, &limits, seq);
                // Its limits as the location has them (names, keys: a
                // `key=` limit's refusal strikes no one), in the same order.
                let (subset, at) = subject
                    .limits
                    .only(|i| limits.iter().any(|(place, _, _)| *place == i));
                let counts = limits
                    .iter()
                    .map(|&(at, limit, whose)| {
                        (count_tag(tag, whose), limit, subject.limits.approx(at))
                    })
                    .collect();
                let part = Part {
                    route,
                    limits: subset,
                    at,
                    counts,
                    rules,
                    offence,
                };
                (part, call)
            })
            .collect()
    }

    /// Takes back what a part of a request's check counted (`seq`: the
    /// request's, its member), in that part's slot.
    pub fn undo(&self, part: &Part, seq: u64) -> Option<Call> {
        let script = self.scripts.undo.as_ref()?;
        let prefix = self.prefix.as_bytes();
        let n = part.counts.len();
        let mut call = ScriptCall::new(&script.sha1, n, 3 + n);
        for (tag, limit, approx) in &part.counts {
            let which = match approx {
                true => ClientKey::Approx(*limit),
                false => ClientKey::Window(*limit),
            };
            call.push(|w| keys::write(w, prefix, tag.as_bytes(), which));
        }
        call.push(|w| args::write_member(w, self.node_id, self.pid, seq))
            .push(|w| args::write_approx(w, part.counts.iter().map(|(_, _, approx)| *approx)));
        for (_, limit, _) in &part.counts {
            call.num(limit.window_ms);
        }
        call.deadline();
        Some(Call::of(script, call))
    }

    /// One strike (a trap hit, a replay).
    pub fn strike(&self, tag: &[u8], rules: BreakerRules) -> Call {
        let script = &self.scripts.strike;
        let mut call = ScriptCall::new(&script.sha1, 3, 5);
        self.breaker_keys(&mut call, tag);
        for rule in args::rules(rules) {
            call.num(rule);
        }
        call.deadline();
        Call::of(script, call)
    }

    /// The spend of `solution` by the client (`tag`) at `now_ms` (epoch),
    /// within `generation` if it is Redis's (a Redis Cluster: the slot's),
    /// atomically; else as before generations (a challenge this node issued
    /// during an outage).
    pub fn spend(
        &self,
        spent_key: &str,
        tag: &[u8],
        solution: &Solution,
        rules: BreakerRules,
        generation: Option<u64>,
        now_ms: u64,
    ) -> Call {
        let script = match generation {
            Some(_) => &self.scripts.gen_spend,
            None => &self.scripts.spend,
        };
        let argc = 7 + usize::from(generation.is_some());
        // KEYS[5] the generation (or, unused, the paid key again: one
        // slot), KEYS[6] the spends waiting for their 429's strike.
        let mut call = ScriptCall::new(&script.sha1, 6, argc);
        call.push(|w| w.extend_from_slice(spent_key.as_bytes()));
        self.breaker_keys(&mut call, tag);
        let prefix = self.prefix.as_bytes();
        let paid = |w: &mut Vec<u8>| keys::write(w, prefix, tag, ClientKey::Paid);
        match generation {
            Some(_) if self.cluster => call.push(|w| {
                generation::write_slot_key(w, prefix, generation::slot_of_tag(tag));
            }),
            Some(_) => call.push(|w| w.extend_from_slice(self.gen_key.as_bytes())),
            None => call.push(paid),
        };
        call.push(paid);
        call.num(solution.spent_until_ms.saturating_sub(now_ms).max(1));
        for rule in args::rules(rules) {
            call.num(rule);
        }
        let paid = Case::Paid {
            struck: solution.forgive,
            waited_out: solution.may_have_been_waited_out(now_ms),
        };
        call.num(args::spend_mode(false, strike_back(paid)));
        if let Some(gen) = generation {
            call.num(gen);
        }
        call.deadline();
        Call::of(script, call)
    }

    /// A spend the zone decided while Redis could not, written to Redis
    /// for `ms` more: recorded whatever the breaker says (the zone decided
    /// it), taking back an unpaid strike Redis may hold for its 429 when it
    /// is the token's first record there.
    pub fn replay(&self, spent_key: &str, tag: &[u8], ms: u64) -> Call {
        let script = &self.scripts.spend;
        let mut call = ScriptCall::new(&script.sha1, 4, 7);
        call.push(|w| w.extend_from_slice(spent_key.as_bytes()));
        self.breaker_keys(&mut call, tag);
        call.num(ms.max(1))
            .num(0)
            .num(0)
            .num(0)
            .num(0)
            .num(args::spend_mode(true, strike_back(Case::PaidDuringOutage)))
            .deadline();
        Call::of(script, call)
    }

    /// The refusals this worker counted for each client of `batches`, in
    /// one call (a Redis Cluster: one client per call, a slot each).
    pub fn batch(&self, batches: &[BatchOf]) -> Call {
        let prefix = self.prefix.as_bytes();
        let n = batches.len();
        let script = &self.scripts.batch;
        let mut call = ScriptCall::new(&script.sha1, 6 * n, 8 * n + 1);
        for b in batches {
            let key = |which| move |w: &mut Vec<u8>| keys::write(w, prefix, b.tag, which);
            call.push(key(ClientKey::Refused(b.limit)));
            self.breaker_keys(&mut call, b.tag);
            call.push(key(ClientKey::Batches(self.node_id)))
                .push(key(ClientKey::Paid));
        }
        for b in batches {
            call.num(b.sending.total).num(b.limit.window_ms);
            for rule in args::rules(b.rules) {
                call.num(rule);
            }
            call.num(b.sending.run).num(b.sending.base);
        }
        call.deadline();
        Call::of(script, call)
    }

    /// Reads (or renews to `fresh`) the single Redis's data generation
    /// (`None`: a Redis Cluster has none).
    pub fn generation(&self, fresh: u64) -> Option<Call> {
        let script = self.scripts.generation.as_ref()?;
        let mut call = ScriptCall::new(&script.sha1, 1, 1);
        call.push(|w| w.extend_from_slice(self.gen_key.as_bytes()))
            .num(fresh);
        Some(Call::of(script, call))
    }
}

/// What a check's reply says for a client under `limits`, `struck` as
/// the script says (`None`: not a reply of the script).
pub fn checked(
    cluster: bool,
    reply: &[i64],
    limits: &Limits,
    rules: BreakerRules,
    offence: Offence,
) -> Option<Checked> {
    match limits.as_slice() {
        [limit] => replies::checked_from_reply(reply, limit.rate, cluster).ok(),
        _ => replies::stacked_checked_from_reply(reply, limits, offence, rules, cluster).ok(),
    }
}

/// The one limit of a location counted per client key, whose check goes
/// by the one-limit scripts (local refusals, coalescing, batches); `None`:
/// stacked or keyed limits, all in the stacked script, decided in Redis.
pub fn single_limit(subject: &Subject) -> Option<RateLimit> {
    match subject.limits.as_slice() {
        [limit] if !limit.is_keyed() => Some(limit.rate),
        _ => None,
    }
}

/// The location's limits a request is counted by (an empty `key=` value
/// leaves it out of one), each with its place among the location's: what
/// [`stacked_checked`] reads the stacked script's reply against.
pub fn counted(subject: &Subject) -> (Limits, [u8; MAX_LIMITS]) {
    subject.limits.only(|i| subject.counted(i).is_some())
}

/// What the stacked script's reply says for a request counted by `kept`
/// (`at`: their places among the location's limits, which the verdict's
/// `limit` names); a request counted by none is admitted, its breaker as
/// Redis says.
pub fn stacked_checked(
    cluster: bool,
    reply: &[i64],
    (kept, at): (&Limits, &[u8; MAX_LIMITS]),
    rules: BreakerRules,
    offence: Offence,
) -> Option<Checked> {
    if kept.is_empty() {
        let any = Limits::one(RateLimit {
            requests: 1,
            window_ms: 1,
        });
        let checked = replies::stacked_checked_from_reply(reply, &any, offence, rules, cluster);
        return checked.ok().map(|checked| Checked {
            verdict: crate::limiter::Verdict {
                allowed: checked.breaker.block == crate::limiter::breaker::Block::Clear,
                ..Default::default()
            },
            struck: false,
            ..checked
        });
    }
    let mut checked =
        replies::stacked_checked_from_reply(reply, kept, offence, rules, cluster).ok()?;
    let decided = usize::from(checked.verdict.limit);
    // Refused by a limit that is not the client's own: the script struck
    // nothing for an unpaid request (`Offence::refused`).
    if offence.refused(!kept.is_keyed(decided)) == Offence::None {
        checked.struck = false;
    }
    checked.verdict.limit = *at.get(decided)?;
    Some(checked)
}

/// What the strike script's reply says.
pub fn struck_reply(reply: &[i64], rules: BreakerRules) -> Option<Reply> {
    replies::struck_from_reply(reply, rules)
        .ok()
        .map(Reply::Struck)
}

/// What the spend scripts' reply says; `Err` with the generation Redis
/// has now (if it says) when the token's is gone (a flush, a failover).
pub fn spent_reply(reply: &[i64]) -> Result<Option<Spent>, Option<u64>> {
    if generation::is_stale(reply) {
        return Err(generation::stale_generation(reply));
    }
    Ok(replies::spent_from_reply(reply).ok())
}

#[cfg(test)]
mod tests;

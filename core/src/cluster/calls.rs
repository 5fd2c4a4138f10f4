//! What cluster mode sends Redis for each operation, and what its answers
//! mean (docs/operations.md, "Sizing Redis"): an operation and its subject
//! become one script call (keys, arguments, the script of this mode), and
//! the script's integers become the store's [`Reply`]. The module sends
//! the calls on nginx's event loop; everything here is plain data.

use core::cell::RefCell;

use super::refusals::Sending;
use super::scripts::args;
use super::scripts::replies::{self, StackedLimits};
use super::scripts::{Script, Scripts};
use crate::cluster::generation;
use crate::cluster::keys::{self, ClientKey};
use crate::limiter::breaker::BreakerRules;
use crate::limiter::{Limits, RateLimit, MAX_LIMITS};
use crate::redis::cluster::ClientSlot;
use crate::redis::command::{encode, Tag};
use crate::redis::pipeline::{Resendable, CLOCK_STEP};
use crate::redis::script_call::{self, widened, ScriptCall, WideKeys, WIDE};
use crate::redis::url::RedisTarget;
use crate::store::take_back::{strike_back, Case};
use crate::store::{Checked, Offence, Reply, Solution, Spent, Subject};

mod checks;
mod stacks;
mod words;
pub use checks::{checks_reply, CheckOf, MAX_GATHERED};
pub use stacks::{part_checked, stacks_reply, Alone, Part};
use words::{LimitWords, Words};

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
        Self::of_text(script.text, call)
    }

    /// A call of the script `text` (the admin view's, outside the
    /// mode's scripts).
    pub fn of_text(text: &'static str, call: ScriptCall) -> Self {
        let (evalsha, shared) = call.finish();
        Call {
            evalsha,
            shared,
            script: text,
        }
    }

    /// The same call as `EVAL <script>`.
    pub fn eval(&self) -> Vec<u8> {
        script_call::eval(&self.evalsha, self.shared, self.script)
    }
}

/// A call sent shares itself (one allocation) with what sends it again:
/// `EVALSHA`, rebuilt as `EVAL` only if Redis lost the script.
impl Resendable for Call {
    fn bytes(&self) -> &[u8] {
        &self.evalsha
    }

    fn on_noscript(&self) -> Option<Vec<u8>> {
        Some(self.eval())
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
    /// Every member's start (`args::write_member_head`), made once.
    member_head: Vec<u8>,
    cluster: bool,
    /// Which slot a client's keys take (a Redis Cluster's `slot=`).
    client_slot: ClientSlot,
    scripts: &'static Scripts,
    /// What the last few stacked calls' limits wrote, for the next under
    /// the same (`stacks::KeptTexts`).
    texts: RefCell<stacks::KeptTexts>,
    /// The words of the last limits and rules checked one at a time.
    words: RefCell<LimitWords>,
    /// `<prefix>{`, every key's start, in [`WIDE`] bytes (`None`: a prefix
    /// too long), and the room a stacked call's keys are written in whole
    /// (`stacks::texts`).
    head: Option<([u8; WIDE], usize)>,
    wide: RefCell<WideKeys>,
}

impl Calls {
    pub fn new(prefix: &str, node_id: u64, pid: u32, cluster: bool) -> Self {
        let mut member_head = Vec::new();
        args::write_member_head(&mut member_head, node_id, pid);
        Calls {
            prefix: prefix.to_owned(),
            gen_key: format!("{prefix}gen"),
            node_id,
            member_head,
            cluster,
            client_slot: ClientSlot::Own,
            scripts: Scripts::for_mode(cluster),
            texts: RefCell::default(),
            words: RefCell::default(),
            head: widened(&[prefix.as_bytes(), b"{"].concat()),
            wide: RefCell::default(),
        }
    }

    /// These calls with client keys in `slot` (`pow_shield_redis ...
    /// cluster slot=`; one Redis has no slots: its own).
    pub fn with_client_slot(self, slot: ClientSlot) -> Self {
        Calls {
            client_slot: match self.cluster {
                true => slot,
                false => ClientSlot::Own,
            },
            ..self
        }
    }

    /// The tag of client `key`'s keys (`keys::client_tag_in`).
    pub fn tag(&self, key: &[u8]) -> Tag {
        keys::client_tag_in(key, self.client_slot)
    }

    /// Which slot a client's keys take.
    pub fn client_slot(&self) -> ClientSlot {
        self.client_slot
    }

    /// Every script this mode runs (the handshake loads all but a Redis
    /// Cluster's part scripts: `Scripts::handshake`).
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
        for script in self.scripts.iter() {
            push("SCRIPT LOAD", &[b"SCRIPT", b"LOAD", script.text.as_bytes()]);
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
        keys::spent(&self.prefix, digest, &self.tag(key), self.cluster)
    }

    /// The client's strikes, trips and unpaid keys, as the breaker parts of
    /// every script take them.
    fn breaker_keys(&self, call: &mut ScriptCall, tag: &[u8]) {
        let (tail, others) = keys::BREAKER;
        call.keys_differing(self.prefix.as_bytes(), tag, tail, others);
    }

    /// A Redis Cluster's check scripts take the slot's generation key last
    /// (`slot`: the slot of `tag`, if known already).
    fn slot_key(&self, call: &mut ScriptCall, (tag, slot): (&[u8], Option<u16>)) {
        self.slot_key_of(call, || {
            slot.unwrap_or_else(|| generation::slot_of_tag(tag))
        });
    }

    /// [`Calls::slot_key`] of the slot `slot` says (known already).
    fn slot_key_of(&self, call: &mut ScriptCall, slot: impl FnOnce() -> u16) {
        if self.cluster {
            let slot = slot();
            call.push(|w| generation::write_slot_key(w, self.prefix.as_bytes(), slot));
        }
    }

    /// A request's member in the sorted sets (`args::write_member`).
    fn member(&self, w: &mut Vec<u8>, seq: u64) {
        w.extend_from_slice(&self.member_head);
        args::lower_hex(w, seq);
    }

    /// The check of `k` requests of one client (`tag`, its hash tag) under
    /// the subject's limits: one limit's window or approximate counter
    /// (`k` > 1: a coalesced burst), or every limit in the stacked script.
    /// `seq` makes the sorted sets' member unique.
    pub fn check(&self, tag: &[u8], subject: &Subject, offence: Offence, k: u32, seq: u64) -> Call {
        self.check_in((tag, None), subject, offence, k, seq)
    }

    /// [`Calls::check`], the slot of `tag` given where it is known
    /// already (`Some`: a Redis Cluster's).
    pub fn check_in(
        &self,
        (tag, slot): (&[u8], Option<u16>),
        subject: &Subject,
        offence: Offence,
        k: u32,
        seq: u64,
    ) -> Call {
        match single_limit(subject) {
            Some(limit) => {
                let approx = subject.limits.approx(0);
                let check = (subject.rules, offence, k, seq);
                self.window_check((tag, slot), limit, approx, check)
            }
            None => self.stacked(&self.whole(tag, subject, offence), seq),
        }
    }

    /// One limit's window script (or, `approx`, its counter's) for `k`
    /// requests (`slot`: that of `tag`, where known already).
    fn window_check(
        &self,
        (tag, slot): (&[u8], Option<u16>),
        limit: RateLimit,
        approx: bool,
        (rules, offence, k, seq): (BreakerRules, Offence, u32, u64),
    ) -> Call {
        // The exact log (a sorted set) or the counter (a hash).
        let script = self.scripts.check(approx);
        let mut call = ScriptCall::new(&script.sha1, 5 + usize::from(self.cluster), 10);
        // Written in place, `<prefix>{<tag>}` once: one call per shielded
        // request; the limit's and the rules' words copied.
        self.with_words((limit, approx), Some(rules), |words, rules| {
            call.keys_differing(self.prefix.as_bytes(), tag, words.tail(), &[keys::REFUSED]);
            self.breaker_keys(&mut call, tag);
            self.slot_key(&mut call, (tag, slot));
            call.encoded(words.numbers())
                .push(|w| self.member(w, seq))
                .num(args::offence(offence))
                .encoded(rules);
        });
        call.num(k.into()).deadline();
        Call::of(script, call)
    }

    /// `f` of the words of `limit` (its counter's, `approx`) and of
    /// `rules` (`None`: no words), made once ([`LimitWords`]).
    fn with_words<R>(
        &self,
        limit: (RateLimit, bool),
        rules: Option<BreakerRules>,
        f: impl FnOnce(&Words, (&[u8], usize)) -> R,
    ) -> R {
        match self.words.try_borrow_mut() {
            Ok(mut kept) => {
                let (words, rules) = kept.of(limit, rules);
                f(words, rules)
            }
            // (Never: nothing calls back into `Calls` while they are
            // made.)
            Err(_) => {
                let mut fresh = LimitWords::default();
                let (words, rules) = fresh.of(limit, rules);
                f(words, rules)
            }
        }
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
    limits: &impl StackedLimits,
    rules: BreakerRules,
    offence: Offence,
) -> Option<Checked> {
    match (limits.limits_len(), limits.rate(0)) {
        (1, Some(limit)) => replies::checked_from_reply(reply, limit, cluster).ok(),
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
    (kept, at): (&impl StackedLimits, &[u8; MAX_LIMITS]),
    rules: BreakerRules,
    offence: Offence,
) -> Option<Checked> {
    if kept.limits_len() == 0 {
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

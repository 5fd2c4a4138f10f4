//! Cluster mode's Lua scripts (docs/operations.md, "Sizing Redis"): one
//! atomic script per store operation, run with `EVALSHA` (falling back to
//! `EVAL` on `NOSCRIPT`), the same rules as the local store's
//! (`store::run` over `limiter::{window, breaker}`) written in Lua.
//!
//! Each script is put together from the `.lua` parts of `scripts/` by one
//! composer ([`compose!`]), at compile time: the shared parts (the breaker,
//! a check's opening and refusal, the log window, the approximate counter,
//! the generations) are written once; a mode differs only in a part (a
//! check's last part and the slot's generation it makes after a refusal, a
//! generation spend's first). A script composes only the functions it can
//! call, and those only its rare paths call (a refusal, a strike, a
//! generation made) as fields a call makes when it first needs them
//! (`rare.lua`): Redis runs a script's body at every call, and each
//! function it defines is a closure made then. [`Scripts::for_mode`]
//! holds every script of a mode with its SHA-1.

use std::sync::LazyLock;

use sha1::{Digest, Sha1};

pub mod args;
pub mod replies;
#[cfg(test)]
pub(crate) mod tests;

/// The one composer: a script's text is its title, then the code of its
/// parts (`.lua` files of `scripts/`), in order.
macro_rules! compose {
    ($title:literal; $($part:literal),+ $(,)?) => {{
        const TEXT: &str = concat!(
            "-- pow-shield: ", $title, "\n",
            $(include_str!(concat!("scripts/", $part, ".lua"))),+
        );
        const CODE: [u8; code_len(TEXT)] = code(TEXT);
        match core::str::from_utf8(&CODE) {
            Ok(code) => code,
            Err(_) => panic!("a script is not UTF-8"),
        }
    }};
}

/// The lines of `text` a script carries: the first (its title), then all
/// but the blank ones and the comments (`--` first). The comments are for
/// the reader of `scripts/`; every connection loads every script, and a
/// Redis Cluster's handshake (every script of the mode) stays under 96 KB.
const fn kept_lines(text: &[u8], mut out: Option<&mut [u8]>) -> usize {
    let (mut at, mut len, mut first) = (0, 0, true);
    while at < text.len() {
        let mut end = at;
        while end < text.len() && text[end] != b'\n' {
            end += 1;
        }
        let mut start = at;
        while start < end && (text[start] == b' ' || text[start] == b'\t') {
            start += 1;
        }
        let comment = start + 1 < end && text[start] == b'-' && text[start + 1] == b'-';
        if first || !(start == end || comment) {
            let mut i = at;
            while i < end {
                if let Some(out) = &mut out {
                    out[len] = text[i];
                }
                len += 1;
                i += 1;
            }
            if let Some(out) = &mut out {
                out[len] = b'\n';
            }
            len += 1;
        }
        (at, first) = (end + 1, false);
    }
    len
}

/// How long the code of `text` is ([`kept_lines`]).
const fn code_len(text: &str) -> usize {
    kept_lines(text.as_bytes(), None)
}

/// The code of `text` ([`kept_lines`]), `N` bytes.
const fn code<const N: usize>(text: &str) -> [u8; N] {
    let mut out = [0; N];
    kept_lines(text.as_bytes(), Some(&mut out));
    out
}

/// Every script's parts, for a mode's last part of a check (`check_end`),
/// the parts a Redis Cluster's check adds among its rare paths' (`slot`:
/// the slot's generation, made after a refusal) and the first part of a
/// generation spend (`gen_guard`, after its rare paths' `guard_rare`).
/// The parts between `rare` and `rare_end` define the functions only rare
/// paths call (`rare.lua`: made only when a call needs them); a script
/// composes only the functions it can call (a test checks it).
macro_rules! texts {
    (check_end: $end:literal, slot: [$($slot:literal),*],
        gen_guard: $guard:literal, guard_rare: [$($guard_rare:literal),+]) => {
        Texts {
            window: compose!("sliding-window log";
                "deadline", "breaker",
                "rare", "strikes", "refusal", "log_retry", $($slot,)* "rare_end",
                "check", "log", "window", "window_one", $end),
            approx: compose!("sliding-window counter (approx)";
                "deadline", "breaker",
                "rare", "strikes", "refusal", "approx_retry", $($slot,)* "rare_end",
                "check", "counter", "approx", $end),
            stacked: compose!("stacked limits";
                "deadline", "breaker",
                "rare", "strikes", "refusal", "log_retry", "approx_retry",
                "generations", "new_generation", "slot_generation", "rare_end",
                "check", "log", "counter", "stacked", "stacks", "stacked_one", $end),
            checks: compose!("several clients' checks";
                "deadline", "breaker",
                "rare", "strikes", "refusal", "log_retry",
                "generations", "new_generation", "slot_generation", "rare_end",
                "check", "log", "window", "checks"),
            strike: compose!("one strike";
                "deadline", "on_time", "breaker", "rare", "strikes", "rare_end", "strike"),
            spend: compose!("spend"; "deadline", "on_time", "breaker", "spend"),
            gen_spend: compose!("spend within the data generation";
                "deadline", "on_time", "rare", $($guard_rare),+, "rare_end", $guard,
                "breaker", "spend"),
            batch: compose!("local refusals";
                "deadline", "on_time", "breaker", "rare", "strikes", "rare_end", "batch"),
            generation: compose!("data generation";
                "rare", "generations", "rare_end", "generation"),
            undo: compose!("counts taken back"; "deadline", "undo"),
        }
    };
}

/// The texts of one mode's scripts (KEYS, ARGV and replies: [`Scripts`]).
pub(crate) struct Texts {
    pub window: &'static str,
    pub approx: &'static str,
    pub stacked: &'static str,
    pub checks: &'static str,
    pub strike: &'static str,
    pub spend: &'static str,
    pub gen_spend: &'static str,
    pub batch: &'static str,
    pub generation: &'static str,
    pub undo: &'static str,
}

/// One Redis (or Sentinel's master): a check replies as it is.
pub(crate) const ONE_REDIS: Texts = texts!(
    check_end: "reply",
    slot: [],
    gen_guard: "gen_guard",
    guard_rare: ["generations"]
);

/// A Redis Cluster: a check's reply ends with the slot's generation, a
/// generation spend checks the slot's.
pub(crate) const REDIS_CLUSTER: Texts = texts!(
    check_end: "slot_reply",
    slot: ["generations", "new_generation", "slot_generation"],
    gen_guard: "slot_gen_guard",
    guard_rare: ["generations", "new_generation"]
);

/// One script: its text and the SHA-1 `EVALSHA` and `SCRIPT LOAD` name it
/// by.
#[derive(Debug)]
pub struct Script {
    /// What it is (for logs): `window`, `approx`, ...
    pub name: &'static str,
    pub text: &'static str,
    /// Lower-case hex.
    pub sha1: String,
}

impl Script {
    fn new(name: &'static str, text: &'static str) -> Script {
        Script {
            name,
            text,
            sha1: script_sha1(text),
        }
    }
}

/// Every script of one mode. Their contracts (KEYS, ARGV, reply) are the
/// same in both modes, except where said.
///
/// Every script that writes (all but the generation's) takes one more
/// argument, last: the call's deadline in Redis's clock (ms, 13 digits;
/// 0 none: `redis::clock`). A call that starts after it writes nothing
/// and answers the status reply `EXPIRED <Redis's ms>` (`clock::expired_ms`).
#[derive(Debug)]
pub struct Scripts {
    /// A Redis Cluster's.
    pub cluster: bool,
    /// The sliding-window log of one limit, with the client's red zone read
    /// and written in the same call.
    ///
    /// - `KEYS[1]`: the client's sorted set (score = admission ms, member
    ///   unique); `KEYS[2]`: refusals in the current window; `KEYS[3]`,
    ///   `KEYS[4]`, `KEYS[5]`: strikes, breaker trips and unpaid strikes
    ///   (all in one hash tag); a Redis Cluster's `KEYS[6]`: the slot's
    ///   generation key (`redis::generation::slot_key`).
    /// - `ARGV[1]` limit, `ARGV[2]` window in ms, `ARGV[3]` unique member
    ///   ([`args::write_member`]), `ARGV[4]` what a refusal is (0 nothing,
    ///   1 an unpaid strike, 2 a strike never taken back:
    ///   [`args::offence`]), `ARGV[5..8]` the breaker rules
    ///   ([`args::rules`]), `ARGV[9]` the requests
    ///   this call decides at once (a coalesced burst of one client): up to
    ///   the free slots are admitted, the rest refused, each a strike until
    ///   the one that reaches the threshold (later ones are blocked:
    ///   neither struck nor counted as refusals).
    ///
    /// Returns ten integers ([`replies::checked_from_reply`] for one
    /// request, [`replies::coalesced_from_reply`] for several):
    /// `{admitted (0/1 for one request), remaining, reset_after_ms,
    /// retry_after_ms, over, strikes, block 0/1/2, block_ms, tripped 0/1/2,
    /// struck}` (`over`: the refusals `KEYS[2]` counts, after a refusal;
    /// after an admission only where the next challenge is priced from
    /// them, none left or `ARGV[4]` 0, else 0); a Redis Cluster's an eleventh, the slot's generation when
    /// any request was refused (made if missing), else 0. A blocked client
    /// writes nothing.
    pub window: Script,
    /// `pow_shield_limit ... approx`: the sliding-window counter, O(1)
    /// memory per client whatever the limit, with the red zone of
    /// [`Scripts::window`]; same keys and arguments (`KEYS[1]` is a hash,
    /// `ARGV[3]` unused), same reply, one request per call (`ARGV[9]` is
    /// 1: checks of the approximate counter are not coalesced).
    ///
    /// Time is cut into fixed windows of `window` ms; the sliding window
    /// ending now covers the current one's first `elapsed` ms and the
    /// previous one's last `window - elapsed`, whose requests are taken as
    /// evenly spread: `estimate = previous × (window − elapsed) / window +
    /// current`, and a request is admitted while `estimate < limit`. Error
    /// bound: at most `limit` requests are admitted per fixed window, so at
    /// most `2 × limit` within any `window`-long span (the exact log:
    /// `limit`), the excess possible only when the previous window's
    /// requests came late in it; when they came early the counter refuses
    /// before the exact count would. `Remaining` is `limit − ⌈estimate⌉`,
    /// `Reset` the end of the next fixed window (when every counted request
    /// has left), `Retry-After` when the estimate drops below the limit.
    pub approx: Script,
    /// Every limit of a location (each exact or `approx`) in one call,
    /// with the client's red zone as in the one-limit scripts, on their
    /// keys (a limit keeps its count when a line is added beside it).
    ///
    /// - `KEYS[1..3]`: strikes, breaker trips and unpaid strikes; then per
    ///   limit `i` (from 1) `KEYS[2 + 2i]` its log (a sorted set) or counter
    ///   (a hash) and `KEYS[3 + 2i]` its refusals in the window; a Redis
    ///   Cluster's slot generation key last.
    /// - `ARGV[1]` the unique member, `ARGV[2]` what a refusal is,
    ///   `ARGV[3..6]` the breaker rules, `ARGV[7]` a `1` for each limit
    ///   counted `approx` and a `0` for each exact one,
    ///   `ARGV[8]` a `1` for each limit counted per client key and a `0`
    ///   for each counted per a `key=` value; then per limit
    ///   `ARGV[7 + 2i]` requests and `ARGV[8 + 2i]` window ms; the
    ///   deadline last.
    ///
    /// Each limit is first read as it would be with this request counted;
    /// then the request is counted by every limit if all have room, else
    /// the first refusing limit (in order) records the refusal, and the
    /// strike if it is the client's own, and nothing is counted. Returns the one-limit reply's first
    /// nine integers (not `struck`: a stacked check is never coalesced) of
    /// the limit that decided (the refusing one, else the one with fewest
    /// remaining, the first of equals), then its 0-based index
    /// ([`replies::stacked_checked_from_reply`]); a Redis Cluster's the
    /// slot's generation last, as the window script's.
    ///
    /// The same script checks several requests' stacked limits in one
    /// call when `ARGV[1]` is `*` (no member is): the node gathers them
    /// (`cluster::node`'s `stacks.rs`; a Redis Cluster's parts of several
    /// requests in one slot, `Calls::parts`; or requests under one
    /// `approx` limit each), as [`Scripts::checks`] does the window
    /// script's; one script, so that the handshake loads its parts once.
    ///
    /// - Request `i`'s keys: the ones above but the slot's generation key,
    ///   in turn; a Redis Cluster's slot generation key last.
    /// - `ARGV[2]` how many sets of requests in a row share their
    ///   arguments; each set's: its requests, then `ARGV[2]` on of the
    ///   above but the deadline (what a refusal is, the rules, approx,
    ///   own, each limit's numbers); then each request's member, in order;
    ///   the deadline last.
    /// - Each request is checked as above (the same Lua function), in
    ///   order. A call that came after its deadline writes nothing for any
    ///   and answers `EXPIRED <ms>`.
    ///
    /// Returns one bulk string of words: per request the ten integers
    /// above (a Redis Cluster's eleven: the slot's generation after a
    /// refusal, else 0) (`calls::stacks_reply`).
    pub stacked: Script,
    /// Several clients' checks, each under one exact limit and for one
    /// request, in one call (the node gathers them: `cluster::node`'s
    /// `gather.rs`): the call's own cost and Redis's clock paid once for
    /// all, and what clients under the same location share sent once.
    ///
    /// - One Redis: client `i` (from 1): `KEYS[i]`, its log; the script
    ///   names its other keys (`keys.rs`'s layout, the log's name less
    ///   its `:w:<n>:<ms>`), fewer strings for Redis to read and Lua to
    ///   make. A Redis Cluster: client `i` (from 0): `KEYS[5i + 1 .. 5i +
    ///   5]`, the window script's first five keys (every key declared, so
    ///   that a slot being migrated answers the call `ASK` or `TRYAGAIN`
    ///   rather than failing it), the slot generation key last (every
    ///   client's keys in that slot).
    /// - `ARGV[1]` how many sets of clients in a row share their arguments;
    ///   each set's eight: its clients, limit, window ms, what a refusal is
    ///   ([`args::offence`]), the four breaker rules ([`args::rules`]); then
    ///   the call's member ([`args::write_member`], its first check's:
    ///   each client's admission goes in a log of its own; a client named
    ///   twice in a call has its second `<member>.2`, and so on); the
    ///   deadline last.
    /// - Each client is checked as the window script checks one request,
    ///   in order. A call that came after its deadline writes nothing for
    ///   any and answers `EXPIRED <ms>`.
    ///
    /// Returns one bulk string of words: per client, `n` for one new in
    /// its window, admitted, without strikes (`{1, limit - 1, window, 0,
    /// ...}`: no number to format), else the window script's ten integers
    /// (a Redis Cluster's eleven, the slot's generation after a refusal)
    /// (`calls::checks_reply`).
    pub checks: Script,
    /// One strike for a client (a trap hit, a replayed solution), unless it
    /// is blocked: `KEYS[1..3]` strikes, trips and unpaid strikes,
    /// `ARGV[1..4]` the rules. Returns `{strikes, block 0/1/2, block_ms,
    /// tripped 0/1/2}` ([`replies::struck_from_reply`]).
    pub strike: Script,
    /// Spends a solved challenge and takes back the strike its 429 recorded
    /// (one of the client's unpaid strikes, if any), in one call, unless
    /// the client is blocked (then nothing changes). `KEYS[1]` the spent
    /// record, `KEYS[2..4]` strikes, trips and unpaid strikes, `KEYS[5]`
    /// unused here (the generation of [`Scripts::gen_spend`]), `KEYS[6]`
    /// (optional) the spends that found no unpaid strike yet (taken from
    /// the next batch of the client's locally refused 429s,
    /// [`Scripts::batch`]); `ARGV[1]` ms the record lives, `ARGV[2..5]` the
    /// rules, `ARGV[6]` how ([`args::spend_mode`], a sum): 1 for a spend
    /// the node's zone already decided and writes now (after an outage or
    /// a full queue): recorded whatever the breaker says; 2 for a
    /// solution whose 429 counted no strike (its token's `st` is 0):
    /// nothing is taken back; 4 for one whose 429's `Retry-After` has
    /// ended (a wait may have taken its strike back: no unpaid strike
    /// found, nothing is kept for `KEYS[6]`). Returns `{spent 0 replayed / 1 first / 2
    /// blocked, strikes, block 0/1/2, block_ms}`
    /// ([`replies::spent_from_reply`]). The same in both modes.
    pub spend: Script,
    /// [`Scripts::spend`], run only within the token's data generation
    /// (`KEYS[5]` the generation key, `ARGV[7]` the token's `gen`):
    /// otherwise nothing is written and it answers `{-1, 0, 0, 0}`; a Redis
    /// Cluster's (`KEYS[5]` the slot's key) `{-1, 0, 0, 0, <the slot's
    /// generation>}`, renewed first if another run of Redis (a promoted
    /// replica, a restart) wrote it.
    pub gen_spend: Script,
    /// A node's locally refused requests of one client (or of up to
    /// [`args::BATCH_CLIENTS`], each with its six keys and eight arguments
    /// in turn), sent in one call (`store::refusals`): `ARGV[1]` the
    /// running total of the worker's refusals of the client in run
    /// `ARGV[7]`; what it adds to the total Redis applied is counted, each
    /// refusal one more in the window's refusal count and, with a strike
    /// threshold, one more unpaid strike, as the window script would have
    /// counted them one by one. `KEYS[1]` the refusals of the limit,
    /// `KEYS[2..4]` strikes, trips and unpaid strikes, `KEYS[5]` the run
    /// and total applied from this worker (`keys::ClientKey::Batches`),
    /// `KEYS[6]` the spends that found no unpaid strike to take back
    /// (`keys::ClientKey::Paid`: they take back as many of the batch's
    /// strikes); `ARGV[2]` the window ms, `ARGV[3..6]` the rules,
    /// `ARGV[8]` the total the worker knows Redis applied (where Redis has
    /// no record of the run: a new run, or Redis lost its data, only what
    /// it adds is counted).
    ///
    /// The strikes of a client blocked meanwhile (by another node) still
    /// count (the node did send those 429s), without extending the block
    /// or counting a trip (a banned client without strikes takes none). The
    /// batch that crosses the threshold opens the breaker (and counts a
    /// trip) as the strike reaching it would have. Returns `over strikes
    /// block(0/1/2) block_ms tripped(0/1/2)` per client, the breaker after
    /// the batch, as one string of decimal integers
    /// ([`replies::batch_text`], [`replies::batches_from_reply`]).
    pub batch: Script,
    /// One Redis's data generation, kept at `<prefix>gen` (`KEYS[1]`;
    /// `ARGV[1]` a fresh random number, used if a new one is needed):
    /// returns the key's value, `run_id:number`. `None` in a Redis Cluster:
    /// each slot's is made by the check that first refuses in it.
    pub generation: Option<Script>,
    /// A Redis Cluster's: what one call of a request's stacked check
    /// counted, taken back when a call to another slot refused it
    /// (`Calls::stacked_parts`). `KEYS` the counts (logs, or counters with
    /// `approx`), `ARGV[1]` the request's member, `ARGV[2]` a `1` for each
    /// key that is a counter and a `0` for each log,
    /// then each key's window ms; the deadline last. Returns how many were
    /// taken back. `None` on one Redis: one call counts every limit.
    pub undo: Option<Script>,
    /// A Redis Cluster's parts of a request's check lighter than the
    /// stacked script's (`calls::Part::alone`). `None` on one Redis.
    pub parts: Option<PartScripts>,
}

/// A Redis Cluster's scripts for a part of a request's check in a slot of
/// its own, each answering as the script it stands for would; a Redis
/// Cluster's reply ends with the slot's generation (`slot_reply`).
#[derive(Debug)]
pub struct PartScripts {
    /// One count without a breaker (another slot's `key=` count):
    /// `KEYS[1]` its log (a counter with `approx`), `KEYS[2]` its
    /// refusals, `KEYS[3]` the slot's generation key; `ARGV[1]` limit,
    /// `ARGV[2]` window ms, `ARGV[3]` the request's member, `ARGV[4]` what
    /// a refusal is (only `0` read: an admission then reads the
    /// refusals), `ARGV[5]` `1` approx, `0` exact; the deadline last.
    /// Answers as [`Scripts::window`] (or [`Scripts::approx`]) with
    /// strikes and ban off.
    pub count: Script,
    /// Several requests' counts in one call (the parts of a slot
    /// gathered): per request its count's two keys, the slot's generation
    /// key last; `ARGV[1]` how many sets, each set's five (its requests,
    /// limit, window ms, what a refusal is, approx), each request's
    /// member, the deadline last. Answers one bulk string, each request's
    /// integers as `count` answers (the stacked script's for a part of
    /// one limit: the same ten integers and the generation).
    pub counts: Script,
    /// The client's breaker alone (its part where every count lies in
    /// other slots): `KEYS[1]`, `KEYS[2]` its strikes and trips, `KEYS[3]`
    /// the slot's generation key; `ARGV[1..4]` the breaker rules, the
    /// deadline last. Answers as [`Scripts::stacked`] for a part of no
    /// limit: admitted, or blocked (with the slot's generation).
    pub standing: Script,
}

/// The texts of [`PartScripts`].
const COUNT: &str = compose!("one count without a breaker";
    "deadline",
    "rare", "log_retry", "approx_retry", "count_refused",
    "generations", "new_generation", "slot_generation", "rare_end",
    "log", "counter", "count", "count_one", "slot_reply");
const COUNTS: &str = compose!("several counts without a breaker";
    "deadline",
    "rare", "log_retry", "approx_retry", "count_refused",
    "generations", "new_generation", "slot_generation", "rare_end",
    "log", "counter", "count", "counts");
const STANDING: &str = compose!("the client's breaker";
    "deadline", "breaker",
    "rare", "generations", "new_generation", "slot_generation", "rare_end",
    "standing", "slot_reply");

static SCRIPTS: LazyLock<[Scripts; 2]> = LazyLock::new(|| {
    [
        Scripts::of(false, &ONE_REDIS),
        Scripts::of(true, &REDIS_CLUSTER),
    ]
});

impl Scripts {
    /// Every script of one mode: a Redis Cluster's (`cluster`), or one
    /// Redis's (Sentinel's master included).
    pub fn for_mode(cluster: bool) -> &'static Scripts {
        &SCRIPTS[usize::from(cluster)]
    }

    fn of(cluster: bool, texts: &Texts) -> Scripts {
        Scripts {
            cluster,
            window: Script::new("window", texts.window),
            approx: Script::new("approx", texts.approx),
            stacked: Script::new("stacked", texts.stacked),
            checks: Script::new("checks", texts.checks),
            strike: Script::new("strike", texts.strike),
            spend: Script::new("spend", texts.spend),
            gen_spend: Script::new("gen_spend", texts.gen_spend),
            batch: Script::new("batch", texts.batch),
            generation: (!cluster).then(|| Script::new("generation", texts.generation)),
            undo: cluster.then(|| Script::new("undo", texts.undo)),
            parts: cluster.then(|| PartScripts {
                count: Script::new("count", COUNT),
                counts: Script::new("counts", COUNTS),
                standing: Script::new("standing", STANDING),
            }),
        }
    }

    /// Every script of the mode, once each: what each connection
    /// `SCRIPT LOAD`s in its handshake. A Redis Cluster's part scripts
    /// ([`PartScripts`]) too: a first call sent as `EVAL` would lose its
    /// `ASKING` on a slot being migrated, and Redis may evict a script
    /// that only `EVAL` left cached.
    pub fn iter(&self) -> impl Iterator<Item = &Script> {
        [
            &self.window,
            &self.approx,
            &self.stacked,
            &self.checks,
            &self.strike,
            &self.spend,
            &self.gen_spend,
            &self.batch,
        ]
        .into_iter()
        .chain(&self.generation)
        .chain(&self.undo)
        .chain(
            self.parts
                .iter()
                .flat_map(|p| [&p.count, &p.counts, &p.standing]),
        )
    }

    /// The check script of one limit: the exact log or the counter.
    pub fn check(&self, approx: bool) -> &Script {
        match approx {
            true => &self.approx,
            false => &self.window,
        }
    }
}

/// Lower-case hex SHA-1 of a script, the name `EVALSHA` and `SCRIPT LOAD`
/// use.
pub fn script_sha1(script: &str) -> String {
    hex::encode(Sha1::digest(script.as_bytes()))
}

//! What a store is asked and what it answers (docs/operations.md, "How a
//! request is decided"), and the one real order in which a store that keeps
//! its state as tables (the nginx zone, the in-memory store of the tests)
//! checks, spends and strikes.
//!
//! Three operations, one vocabulary: [`Op::Check`] → [`Reply::Checked`],
//! [`Op::Spend`] → [`Reply::Spent`], [`Op::Strike`] → [`Reply::Struck`];
//! a failure is [`Reply::Down`] (the store is unavailable: the fallback
//! chain, then `pow_shield_fail`, decide) or [`Reply::Full`] (no room even
//! after eviction, with the `Retry-After` to answer). Redis runs the same
//! steps in its scripts (`cluster::scripts`).
//!
//! The functions here are written once over [`Tables`]: a table store
//! supplies lookups, insertion (making room itself) and the expiry of what
//! it keeps; the order of the steps, and what is written when, lives here.

pub mod breaker_generation;
mod memory;
pub mod spent;
mod table_key;
pub mod take_back;
#[cfg(test)]
mod tests;

pub use memory::MemoryStore;
pub use spent::SpentRoom;
pub use table_key::{TableKey, INLINE_KEY};

use crate::limiter::breaker::{Block, BreakerRules, BreakerStatus, StrikeCounter};
use crate::limiter::window;
use crate::limiter::{stacked_verdict, Limits, RateLimit, Verdict, MAX_LIMITS};
use take_back::{strike_back, Back, Case};

/// A solution the request carries, ready to be spent: its token's digest
/// and until when the spent record must be kept (epoch ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Solution {
    pub digest: [u8; 32],
    pub spent_until_ms: u64,
    /// The data generation its challenge was issued in (its token's `gen`).
    pub generation: Option<u64>,
    /// Its 429 counted a strike (its token's `st`): spending it takes one
    /// unpaid strike back. A challenge that counted none (a location with
    /// strikes off, a 409/410/422's fresh one) takes back nothing.
    pub forgive: bool,
    /// When its 429's `Retry-After` ended (its token's `ra`, epoch ms):
    /// from then on the client may have been admitted without paying, and
    /// that wait took the strike back already. `None`: a token without one.
    pub retry_at_ms: Option<u64>,
}

impl Solution {
    /// Whether a wait may have taken its 429's strike back by `now_ms`
    /// (epoch): its `Retry-After` has ended, and a client is admitted under
    /// the limit that refused it no sooner. A strike is taken back once per
    /// refusal: a spend then takes back an unpaid strike if one is left,
    /// and never stands in for one still on its way (cluster mode's
    /// batches). A token without `ra` (a node that predates it): no.
    pub fn may_have_been_waited_out(&self, now_ms: u64) -> bool {
        self.retry_at_ms.is_some_and(|at| now_ms >= at)
    }

    /// Whether its 429's strike is still owed back under `rules` if it is
    /// not spent: that 429 counted one, and the location counts strikes.
    pub fn owed(&self, rules: BreakerRules) -> bool {
        self.forgive && rules.strikes.is_some()
    }
}

/// Whether a correct solution can be spent now (the module asks its
/// Redis store before it verifies against the limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spendable {
    /// Spend it.
    Now,
    /// Not now (Redis unavailable, another node's outage generation, its
    /// generation being learnt): a fresh challenge, no offence.
    NotNow,
    /// Older than the generation this worker knows for the client: it
    /// never will be (an old token sent again is unpaid: it strikes).
    Stale,
}

/// What refusing a checked request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offence {
    /// Nothing: it carries a valid solution.
    None,
    /// A strike that paying the challenge sent takes back (a 429).
    Unpaid,
    /// A strike never taken back (a failed verification).
    Failed,
}

impl Offence {
    /// What refusing it is when `by_own_limit` says whether the limit that
    /// refused it (the first one over, in the order written) counts per
    /// client key: an unpaid request refused by a limit whose key is
    /// someone else's too (a network, the site) is no offence. The client cannot help that others took
    /// the slots; it is priced, never struck or blocked for them (SPEC §5).
    /// A failed verification is an offence whatever refused it.
    pub fn refused(self, by_own_limit: bool) -> Offence {
        match self {
            Offence::Unpaid if !by_own_limit => Offence::None,
            offence => offence,
        }
    }
}

/// One store operation of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Count the request against its limit and read the client's breaker;
    /// a refusal is a strike unless `Offence::None`.
    Check { offence: Offence },
    /// Mark the solution spent and take back the strike its 429 counted
    /// (one unpaid strike of the client, if it counted one).
    Spend(Solution),
    /// Record a strike (a trap hit, a replay).
    Strike,
}

impl Op {
    /// What the zone is asked when it stands in for Redis (the `local`
    /// fallback, a full queue): the same, except that an unpaid refusal is
    /// no strike. Redis, once back, would not confirm it, and a client
    /// paying through several nodes can pay each challenge only at the
    /// node that issued it (SPEC §5: a node never blocks a client on
    /// strikes Redis does not confirm). Failed verifications, replays and
    /// trap hits still strike.
    pub fn standing_in(self) -> Op {
        match self {
            Op::Check {
                offence: Offence::Unpaid,
            } => Op::Check {
                offence: Offence::None,
            },
            op => op,
        }
    }
}

/// What a check found: the limiter's verdict and the client's breaker,
/// from one round trip.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Checked {
    pub verdict: Verdict,
    pub breaker: BreakerStatus,
    /// The check recorded a strike (a refused offence of an unblocked
    /// client, strikes on).
    pub struck: bool,
    /// The client's data generation, where the store keeps one per client
    /// (a Redis Cluster slot's, `cluster::generation`): the challenge sent
    /// carries it, and a solution of a challenge issued in another one is
    /// not spent. `None`: the node's own (the zone, one Redis).
    pub generation: Option<u64>,
    /// A store that failed late may have counted a strike for this
    /// refusal that the answering one did not (Redis ran the check, its
    /// reply was lost): the challenge sent takes one back when paid.
    pub maybe_struck: bool,
}

/// What spending a correct solution did: one atomic step of a store,
/// which also takes back the strike the challenge's 429 recorded. The
/// same four answers in local mode and cluster mode: whatever a store
/// must know to spend (cluster mode's data generations, an outage) it
/// decides itself (`cluster::node`, `cluster::fallback`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spent {
    /// First spend: the solution admits the request, and the strike its
    /// 429 counted was taken back (never below 0); the breaker after it.
    Accepted(BreakerStatus),
    /// Spent before, or in a data generation the store lost (what was
    /// spent in it is unknown): a replay, an offence.
    Replayed,
    /// The client is blocked: nothing was spent, nothing taken back.
    Blocked(BreakerStatus),
    /// Not recorded, and no offence: the client gets a fresh challenge
    /// (the solution cannot be spent here now: Redis unavailable or busy,
    /// another generation's, or no room for its record). `pays_back`: its
    /// 429's strike is still counted and the store will not take it back
    /// itself: paying the fresh challenge does (SPEC §5). `false`: none
    /// was counted, or the store takes it back once Redis answers.
    NotRecorded { pays_back: bool },
}

/// What a strike found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Struck {
    pub breaker: BreakerStatus,
    /// A strike was recorded (not while blocked, not with strikes off).
    pub struck: bool,
}

/// A store's answer to an [`Op`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    Checked(Checked),
    Spent(Spent),
    Struck(Struck),
    /// The store is unavailable and no fallback answered.
    Down,
    /// No room to record this, even after eviction (the zone is full of
    /// unexpired spent records): refused with 503 and this `Retry-After`,
    /// never passed, or a solution could be replayed.
    Full {
        retry_after_ms: u64,
    },
}

/// A request's `key=` values, by the place of the limit each is for
/// (`None` beside a limit counted per client key; an empty value leaves
/// the request out of that limit only). As long as the limits where any
/// limit has a `key=`, else empty: what the request holds, borrowed.
pub type KeyValues<'a> = &'a [Option<&'a [u8]>];

/// No `key=` values: every limit per client key.
pub const CLIENT_KEYS: KeyValues<'static> = &[];

/// Whose count a limit's bucket is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counted<'a> {
    /// The client's (its key).
    Client(&'a [u8]),
    /// Its own `key=` value's: a network, an AS, the whole site.
    Own(&'a [u8]),
    /// A key's spent records (a client's tokens, a bot's nonces), counted
    /// against its share of the store ([`spent`]).
    Spends(&'a [u8]),
}

/// The request's facts an operation needs.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    /// The client key (never empty: an empty key is exempt). Strikes,
    /// blocks and bans are always the client's.
    pub key: &'a [u8],
    /// The location's limits, in the order written, borrowed (a trap may
    /// have none: a check passes).
    pub limits: &'a Limits,
    /// This request's `key=` values, by limit.
    pub key_values: KeyValues<'a>,
    pub rules: BreakerRules,
    /// The location's difficulty rises with a client's refusals: Redis
    /// must count every one (cluster mode's local refusals report them
    /// even with strikes off).
    pub rising: bool,
}

impl<'a> Subject<'a> {
    /// Whose count limit `i` is for this request; `None`: the request is
    /// left out of it (an empty `key=` value).
    pub fn counted(&self, i: usize) -> Option<Counted<'a>> {
        match self.key_values.get(i).copied().flatten() {
            None => Some(Counted::Client(self.key)),
            Some([]) => None,
            Some(value) => Some(Counted::Own(value)),
        }
    }

    /// The limits this request is counted by, in the order written, one
    /// at a time: each one's place among the location's, its rate, and
    /// whose count it is (a limit whose `key=` value came out empty is
    /// left out, [`Subject::counted`]).
    #[inline(always)]
    pub fn counted_iter(&self) -> impl Iterator<Item = (usize, RateLimit, Counted<'a>)> + '_ {
        let limits = self.limits.as_slice().iter().enumerate();
        limits.filter_map(|(at, limit)| Some((at, limit.rate, self.counted(at)?)))
    }

    /// [`Subject::counted_iter`] as a list.
    #[inline(always)]
    pub fn counted_limits(&self) -> ([(usize, RateLimit, Counted<'a>); MAX_LIMITS], usize) {
        let none = RateLimit {
            requests: 0,
            window_ms: 0,
        };
        let mut out = [(0, none, Counted::Client(self.key)); MAX_LIMITS];
        let mut n = 0;
        for (slot, counted) in out.iter_mut().zip(self.counted_iter()) {
            *slot = counted;
            n += 1;
        }
        (out, n)
    }
}

/// The two clocks of a store: buckets and breakers run on a monotonic clock
/// (a wall-clock step must not freeze or refill them), spent records on the
/// token's epoch time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Now {
    pub monotonic_ms: u64,
    pub epoch_ms: u64,
}

/// The zone (or another table store) had no room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoRoom {
    pub retry_after_ms: u64,
}

/// What a full table store gives up to make room for a new entry, in
/// this order, trying the insert again after each: first the oldest local
/// refusals of cluster mode (forgetting one costs one Redis call), then
/// expired spent records (they protect nothing any more), then the least
/// recently used
/// buckets and breakers (forgetting one only forgives a client). An
/// unexpired spent record is never given up: forgetting it would reopen its
/// token to replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MakeRoom {
    /// Try as it is.
    Nothing,
    OldestRefusals,
    ExpiredSpent,
    OldestBuckets,
    OldestBreakers,
}

/// The order in which [`MakeRoom`] steps are tried.
pub const MAKE_ROOM: [MakeRoom; 5] = [
    MakeRoom::Nothing,
    MakeRoom::OldestRefusals,
    MakeRoom::ExpiredSpent,
    MakeRoom::OldestBuckets,
    MakeRoom::OldestBreakers,
];

/// Bounds of a refusal's `Retry-After` when no room could be made (room
/// may free up sooner than the oldest spent record expires: buckets drain,
/// other records expire).
pub const FULL_RETRY_MS: (u64, u64) = (1_000, 60_000);

/// A full store's `Retry-After`: until its oldest spent record expires,
/// within [`FULL_RETRY_MS`].
pub fn full_retry_after_ms(oldest_spent_expires_at_ms: Option<u64>, now_ms: u64) -> u64 {
    let (least, most) = FULL_RETRY_MS;
    oldest_spent_expires_at_ms
        .map_or(least, |at| at.saturating_sub(now_ms))
        .clamp(least, most)
}

/// A store of tables: a client's bucket per limit, its breaker, and spent
/// records. Each method finds the entry (making it when `create`, and room
/// for it when needed), lets `f` read or change it, and keeps the entry
/// until the time `f` returns (for the store's expiry and LRU).
pub trait Tables {
    /// The bucket of `key` (a client's, or a `key=` value's) for `limit`,
    /// made if missing.
    fn bucket<R>(
        &mut self,
        key: Counted,
        limit: RateLimit,
        f: impl FnOnce(&mut window::SlidingWindow) -> (R, u64),
    ) -> Result<R, NoRoom>;

    /// The client's breaker; made if missing when `create`, else `Ok(None)`.
    fn breaker<R>(
        &mut self,
        key: &[u8],
        create: bool,
        f: impl FnOnce(&mut StrikeCounter) -> R,
    ) -> Result<Option<R>, NoRoom>;

    /// Records `digest` spent until `until_ms` (epoch); `Ok(false)` if an
    /// unexpired record holds it already. A record is never given up before
    /// it expires, and none is made beyond [`Tables::spent_room`]'s `most`.
    fn spend(&mut self, digest: &[u8; 32], until_ms: u64, now_ms: u64) -> Result<bool, NoRoom>;

    /// An unexpired record holds `digest` at `now_ms` (epoch).
    fn spent(&mut self, digest: &[u8; 32], now_ms: u64) -> bool;

    /// The part of the store spent records may take.
    fn spent_room(&self) -> SpentRoom;
}

/// What [`record`] did with a spent record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Recorded now: the first use.
    New,
    /// An unexpired record held it already: a replay.
    Held,
    /// Not recorded: its key's share, or the store's, is used up (no
    /// offence; not accepted either, or it could be replayed).
    NoRoom,
}

/// Records `digest` spent by `owner` (a client key, a bot) until
/// `until_ms` (epoch), within the owner's share of the store and the
/// store's share for spent records ([`spent`]). `longest_ms`: the longest
/// any record of this owner can live (the share is counted over it, so
/// that the owner never holds more at once). A replay is found before
/// the share is looked at, and a record is counted in the share only once
/// made: replaying someone's record, or a store without room, never uses
/// up a share.
pub fn record(
    tables: &mut impl Tables,
    owner: &[u8],
    digest: &[u8; 32],
    until_ms: u64,
    longest_ms: u64,
    now: Now,
) -> Recorded {
    if tables.spent(digest, now.epoch_ms) {
        return Recorded::Held;
    }
    let quota = tables.spent_room().quota(longest_ms);
    let share = |count: bool| {
        move |w: &mut window::SlidingWindow| {
            let mut copy = *w;
            let verdict = window::admit(
                if count { &mut *w } else { &mut copy },
                quota,
                now.monotonic_ms,
            );
            (verdict.allowed, w.keep_until_ms(quota))
        }
    };
    if tables.bucket(Counted::Spends(owner), quota, share(false)) != Ok(true) {
        return Recorded::NoRoom;
    }
    match tables.spend(digest, until_ms, now.epoch_ms) {
        Ok(true) => {
            // Counted now it is made (no room for the count: it is lost,
            // as a forgotten bucket is).
            let _ = tables.bucket(Counted::Spends(owner), quota, share(true));
            Recorded::New
        }
        Ok(false) => Recorded::Held,
        Err(NoRoom { .. }) => Recorded::NoRoom,
    }
}

/// Runs `op` on a table store: the one order every table store follows.
pub fn run(tables: &mut impl Tables, op: Op, subject: &Subject, now: Now) -> Reply {
    let result = match op {
        Op::Check { offence } => {
            check(tables, subject, offence, now.monotonic_ms).map(Reply::Checked)
        }
        Op::Spend(solution) => spend(tables, subject, solution, now).map(Reply::Spent),
        Op::Strike => {
            strike(tables, subject.key, subject.rules, now.monotonic_ms).map(Reply::Struck)
        }
    };
    result.unwrap_or_else(|NoRoom { retry_after_ms }| Reply::Full { retry_after_ms })
}

/// The breaker's breaker now, if the client has a breaker (no writes).
#[inline]
fn status_now(
    tables: &mut impl Tables,
    key: &[u8],
    rules: BreakerRules,
    now_ms: u64,
) -> BreakerStatus {
    tables
        .breaker(key, false, |s| s.status(rules, now_ms))
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Red first (a blocked client costs one lookup and writes nothing), then
/// the bucket, then the strike of a refused offence.
fn check(
    tables: &mut impl Tables,
    subject: &Subject,
    offence: Offence,
    now_ms: u64,
) -> Result<Checked, NoRoom> {
    let rules = subject.rules;
    let breaker = status_now(tables, subject.key, rules, now_ms);
    if breaker.block != Block::Clear {
        return Ok(Checked {
            breaker,
            ..Checked::default()
        });
    }
    // One limit (the common case): no list of the counted ones to make.
    let (one, list);
    let counted: &[(usize, RateLimit, Counted)] = match subject.limits.as_slice() {
        [limit] => match subject.counted(0) {
            Some(key) => {
                one = [(0, limit.rate, key)];
                &one
            }
            None => &[],
        },
        _ => {
            list = subject.counted_limits();
            &list.0[..list.1]
        }
    };
    let verdict = match counted {
        [] => {
            return Ok(Checked {
                verdict: Verdict {
                    allowed: true,
                    ..Verdict::default()
                },
                breaker,
                ..Checked::default()
            })
        }
        [(at, limit, key)] => {
            let verdict = admit(tables, *key, *limit, now_ms)?;
            let own = !verdict.allowed && matches!(key, Counted::Client(_));
            let verdict = Verdict {
                limit: *at as u8,
                ..verdict
            };
            (verdict, own)
        }
        limits => admit_stacked(tables, limits, now_ms)?,
    };
    let (verdict, by_own_limit) = verdict;
    let offence = match verdict.allowed {
        true => offence,
        false => offence.refused(by_own_limit),
    };
    let mut checked = Checked {
        verdict: overage_reported(verdict, offence),
        breaker,
        ..Checked::default()
    };
    if verdict.allowed && offence == Offence::Unpaid && breaker.strikes > 0 {
        waited(tables, subject, &mut checked, now_ms);
    }
    if !verdict.allowed && offence != Offence::None && rules.strikes.is_some() {
        // A strike that finds no room is lost: forgetting one only forgives
        // a client.
        let strike = |s: &mut StrikeCounter| match offence {
            Offence::Unpaid => s.strike_unpaid(rules, now_ms),
            _ => s.strike(rules, now_ms),
        };
        if let Ok(Some(breaker)) = tables.breaker(subject.key, true, strike) {
            checked.breaker = breaker;
            checked.struck = true;
        }
    }
    Ok(checked)
}

/// What an admitted request's verdict reports of its limit's refusals
/// (`Verdict::over`): the count where the next challenge is priced from it
/// (no request left, or the request carries a solution: SPEC §4, "Paying
/// ahead"), else 0, as the Redis scripts, whose green path reads nothing
/// more.
pub(crate) fn overage_reported(verdict: Verdict, offence: Offence) -> Verdict {
    let priced = !verdict.allowed || verdict.remaining == 0 || offence == Offence::None;
    Verdict {
        over: if priced { verdict.over } else { 0 },
        ..verdict
    }
}

/// A client admitted (without a solution) under a limit that refused it
/// lately waited out that refusal's `Retry-After`: waiting is paying with
/// time, so one unpaid strike is taken back and that refusal no longer
/// counts as over (one strike back per refusal, never below 0), as the
/// Redis scripts' `waited` does. `checked` then reports the breaker after
/// it, and no longer that refusal among its limit's.
fn waited(tables: &mut impl Tables, subject: &Subject, checked: &mut Checked, now_ms: u64) {
    if strike_back(Case::Waited) == Back::Nothing {
        return;
    }
    if let Some((limit, after)) = wait_taken_back(tables, subject, now_ms) {
        checked.breaker = after.unwrap_or(checked.breaker);
        if limit == usize::from(checked.verdict.limit) {
            checked.verdict.over = checked.verdict.over.saturating_sub(1);
        }
    }
}

/// [`waited`]'s steps: the place of the limit a refusal was taken back
/// under, and the breaker after it, if one was.
fn wait_taken_back(
    tables: &mut impl Tables,
    subject: &Subject,
    now_ms: u64,
) -> Option<(usize, Option<BreakerStatus>)> {
    let unpaid = tables
        .breaker(subject.key, false, |s| s.unpaid_now(now_ms))
        .ok()
        .flatten()?;
    if unpaid == 0 {
        return None;
    }
    let (counted, n) = subject.counted_limits();
    // Only the client's own limits: a `key=` limit's refusals strike no one.
    let mut own = counted[..n]
        .iter()
        .filter(|(_, _, key)| matches!(key, Counted::Client(_)));
    let (refused_here, _, _) = own.find(|(_, limit, key)| {
        tables
            .bucket(*key, *limit, |w| {
                (
                    window::take_back_refusal(w, now_ms),
                    w.keep_until_ms(*limit),
                )
            })
            .unwrap_or(false)
    })?;
    let rules = subject.rules;
    let after = tables
        .breaker(subject.key, false, |s| {
            s.forgive(rules, now_ms);
            s.status(rules, now_ms)
        })
        .ok()
        .flatten();
    Some((*refused_here, after))
}

/// One request into `key`'s bucket for `limit`.
fn admit(
    tables: &mut impl Tables,
    key: Counted,
    limit: RateLimit,
    now_ms: u64,
) -> Result<Verdict, NoRoom> {
    tables.bucket(key, limit, |b| window::admit_keeping(b, limit, now_ms))
}

/// Stacked limits (`limiter::limits`): the request is counted by every
/// bucket if all have room, else only the first refusing one records the
/// refusal. Each bucket is looked up once on the way (the common request
/// has room in all): it counts the request, keeping the window as it was;
/// the first refusal stops the counting (the buckets after it are only
/// asked what they would say), and the buckets before it take the
/// request back (a second lookup, on the refused path only). A bucket
/// with no room for it counts the request nowhere either.
/// `limits` are those the request is counted by, each with its place
/// among the location's (the verdict's `limit`) and whose count it is.
/// Also says whether the refusal is the client's own: the limit that
/// decided it (the first refusing one, in the order written) counts per
/// client key.
fn admit_stacked(
    tables: &mut impl Tables,
    limits: &[(usize, RateLimit, Counted)],
    now_ms: u64,
) -> Result<(Verdict, bool), NoRoom> {
    let mut verdicts = [Verdict::default(); MAX_LIMITS];
    // The windows as they were before they counted the request.
    let mut before = [window::SlidingWindow::default(); MAX_LIMITS];
    let mut refusing = None;
    for (at, (_, limit, key)) in limits.iter().enumerate() {
        let (counting, saved) = (refusing.is_none(), &mut before[at]);
        let asked = tables.bucket(*key, *limit, |b| {
            if !counting {
                let mut copy = *b;
                let verdict = window::admit(&mut copy, *limit, now_ms);
                return (verdict, b.keep_until_ms(*limit));
            }
            *saved = *b;
            window::admit_keeping(b, *limit, now_ms)
        });
        let verdict = match asked {
            Ok(verdict) => verdict,
            Err(full) => {
                take_back(tables, &limits[..at], &before);
                return Err(full);
            }
        };
        verdicts[at] = verdict;
        if counting && !verdict.allowed {
            refusing = Some(at);
        }
    }
    if let Some(refusing) = refusing {
        take_back(tables, &limits[..refusing], &before);
    }
    let verdicts = &mut verdicts[..limits.len()];
    let by_own_limit =
        refusing.is_some_and(|i| matches!(limits.get(i), Some((_, _, Counted::Client(_)))));
    let mut verdict = stacked_verdict(verdicts);
    verdict.limit = limits
        .get(usize::from(verdict.limit))
        .map_or(0, |(at, _, _)| *at as u8);
    Ok((verdict, by_own_limit))
}

/// Stacked buckets that counted a request another refused get their
/// windows back as they were before it (`before`, by place). One given up
/// meanwhile to make room is made again as it was; one that finds no room
/// at all went with its count.
fn take_back(
    tables: &mut impl Tables,
    counted: &[(usize, RateLimit, Counted)],
    before: &[window::SlidingWindow; MAX_LIMITS],
) {
    for ((_, limit, key), was) in counted.iter().zip(before) {
        let _ = tables.bucket(*key, *limit, |b| {
            *b = *was;
            ((), b.keep_until_ms(*limit))
        });
    }
}

/// Red first (a blocked client spends nothing), then the record, then the
/// strike it takes back: one step for the store.
fn spend(
    tables: &mut impl Tables,
    subject: &Subject,
    solution: Solution,
    now: Now,
) -> Result<Spent, NoRoom> {
    let (key, rules) = (subject.key, subject.rules);
    let breaker = status_now(tables, key, rules, now.monotonic_ms);
    if breaker.block != Block::Clear {
        return Ok(Spent::Blocked(breaker));
    }
    let longest_ms = tables.spent_room().token_lifetime_ms;
    let until_ms = solution.spent_until_ms;
    match record(tables, key, &solution.digest, until_ms, longest_ms, now) {
        Recorded::New => {}
        Recorded::Held => return Ok(Spent::Replayed),
        // The payer gets a fresh challenge; nobody else pays for it.
        Recorded::NoRoom => {
            let pays_back = solution.owed(rules);
            return Ok(Spent::NotRecorded { pays_back });
        }
    }
    // (The zone holds no strike on its way: what is owed is one now.)
    let case = Case::Paid {
        struck: solution.forgive,
        waited_out: false,
    };
    let forgiven = tables.breaker(key, false, |s| {
        if strike_back(case) != Back::Nothing {
            s.forgive(rules, now.monotonic_ms);
        }
        s.status(rules, now.monotonic_ms)
    });
    Ok(Spent::Accepted(forgiven.ok().flatten().unwrap_or_default()))
}

/// One strike unless blocked; no room for a new breaker is a refusal.
fn strike(
    tables: &mut impl Tables,
    key: &[u8],
    rules: BreakerRules,
    now_ms: u64,
) -> Result<Struck, NoRoom> {
    let was = status_now(tables, key, rules, now_ms);
    let breaker = match tables.breaker(key, true, |s| s.strike(rules, now_ms))? {
        Some(breaker) => breaker,
        None => was,
    };
    Ok(Struck {
        breaker,
        struck: was.block == Block::Clear && rules.strikes.is_some(),
    })
}

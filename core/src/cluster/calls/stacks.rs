//! Stacked checks (every limit of a request in one call of the stacked
//! script; a Redis Cluster's one call per slot, [`Part`]) and several
//! requests' stacked checks in one call (the stacked script's, `Scripts::stacked`): what the node
//! gathers (`cluster::node`'s `stacks.rs`) goes to Redis as one `EVALSHA`,
//! and its one reply is cut into each request's.

use super::{Call, Calls, ScriptCall};
use crate::cluster::generation;
use crate::cluster::keys::{self, ClientKey};
use crate::cluster::scripts::args;
use crate::cluster::scripts::replies::StackedLimits;
use crate::limiter::breaker::BreakerRules;
use crate::limiter::{RateLimit, MAX_LIMITS};
use crate::redis::command::Tag;
use crate::store::{Counted, Offence, Subject};
use arguments::{part_args, part_words};
use counts::{own_tag, route_head, Count, Counts, TagOf};
pub use reply::{part_checked, stacks_reply};
pub(super) use texts::{KeptTexts, Texts};

mod arguments;
mod counts;
#[cfg(test)]
mod differential;
mod parts;
mod reply;
mod texts;

/// One stacked call of a request's check: every limit it is counted by
/// (one Redis), or those of one slot (a Redis Cluster,
/// [`Calls::stacked_parts`]); also one request under one `approx` limit,
/// gathered ([`Part::approx`]).
#[derive(Clone, Debug)]
pub struct Part {
    /// A hash tag of its keys, which routes its call, and whose breaker
    /// it reads (the client's; another slot's part: its own, no rules).
    pub route: Tag,
    /// Each of its limits' place among the location's (its counts', in
    /// the same order: only its own limits, not a copy of the location's
    /// list, [`StackedLimits`]).
    pub at: [u8; MAX_LIMITS],
    /// Each count: what it writes, and what an undo takes back.
    counts: Counts,
    /// Its breaker rules and what a refusal is there (the client's part
    /// only: the others strike no one).
    pub rules: BreakerRules,
    pub offence: Offence,
    /// The slot of `route`, where [`Calls::parts`] made it already.
    slot: Option<u16>,
}

/// What requests in a row of a gathered call share: what a refusal is,
/// the breaker rules, each limit's numbers, `approx` and own.
pub type Set = (u64, [u64; 4], Vec<(u32, u64, bool, bool)>);

/// No breaker: another slot's part strikes no one.
const NO_RULES: BreakerRules = BreakerRules {
    strikes: None,
    ban: None,
};

/// The script a part goes by in a call of its own (gathered: the counts
/// script's call when every part is a count, `Calls::counts`, else the
/// stacked script's, `Calls::stacks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alone {
    /// The client's own exact count with its breaker, as the window
    /// script checks one client: the same keys (the count's tag is the
    /// route's), and its refusal or wait touches the breaker as the
    /// stacked script's would.
    Window,
    /// The same, one `approx` count (the approx script).
    Approx,
    /// One exact count without a breaker (strikes and ban off: another
    /// slot's `key=` count): the count script, no breaker keys.
    Count,
    /// The same, one `approx` count.
    CountApprox,
    /// No count: the client's breaker alone (its limits all in other
    /// slots).
    Standing,
    /// Any other: the stacked script.
    Stacked,
}

impl Alone {
    /// Whether its reply is the one-limit scripts' (else the stacked
    /// script's).
    fn one_limit(self) -> bool {
        matches!(
            self,
            Alone::Window | Alone::Approx | Alone::Count | Alone::CountApprox
        )
    }
}

/// A part of no count, routed by an empty tag: one to make again in
/// place ([`Calls::whole_in`]).
impl Default for Part {
    fn default() -> Part {
        Part::empty((Tag::from(&[][..]), None, NO_RULES, Offence::None))
    }
}

/// A part kept as itself ([`Calls::parts_in`]).
impl AsRef<Part> for Part {
    fn as_ref(&self) -> &Part {
        self
    }
}

impl AsMut<Part> for Part {
    fn as_mut(&mut self) -> &mut Part {
        self
    }
}

/// A part's limits are its counts' (in the location's order).
impl StackedLimits for Part {
    fn limits_len(&self) -> usize {
        self.counts.len()
    }

    fn rate(&self, i: usize) -> Option<RateLimit> {
        self.counts.get(i).map(|c| c.limit)
    }

    fn is_keyed(&self, i: usize) -> bool {
        self.counts.get(i).is_some_and(|c| c.keyed)
    }
}

impl Part {
    /// Which script checks this part alone as the stacked script would
    /// (measured: a lighter script costs Redis less for the same work,
    /// its text smaller to enter, fewer keys and arguments). One count
    /// whose keys share the route's tag: without a breaker, the count
    /// script; the client's own, the one-limit script (its refusal may
    /// strike, its admission take back a wait, as there). No count: the
    /// client's breaker alone.
    pub fn alone(&self) -> Alone {
        let [threshold, _, after, _] = args::rules(self.rules);
        let breaker = threshold > 0 || after > 0;
        match self.counts.as_slice() {
            [] => Alone::Standing,
            // (The route's own: no bytes to compare.)
            [c] if c.tag == TagOf::Route || self.tag(c) == self.route.as_bytes() => {
                match (breaker, c.own, c.approx) {
                    (false, _, false) => Alone::Count,
                    (false, _, true) => Alone::CountApprox,
                    (true, true, false) => Alone::Window,
                    (true, true, true) => Alone::Approx,
                    (true, false, _) => Alone::Stacked,
                }
            }
            _ => Alone::Stacked,
        }
    }

    /// One request of client `tag` under one `approx` limit of its own (a
    /// gathered call checks it as the stacked script checks one limit).
    pub fn approx(tag: &[u8], limit: RateLimit, rules: BreakerRules, offence: Offence) -> Part {
        let count = Count {
            tag: TagOf::Route,
            limit,
            approx: true,
            own: true,
            keyed: false,
        };
        let mut counts = Counts::new();
        counts.push(count, None);
        Part {
            route: Tag::from(tag),
            at: [0; MAX_LIMITS],
            counts,
            rules,
            offence,
            slot: None,
        }
    }

    /// A part of no count yet, routed by `route` (in `slot`, if known).
    fn empty((route, slot, rules, offence): (Tag, Option<u16>, BreakerRules, Offence)) -> Part {
        Part {
            route,
            at: [0; MAX_LIMITS],
            counts: Counts::new(),
            rules,
            offence,
            slot,
        }
    }

    /// Made again in place as [`Part::empty`] makes a part (its room
    /// for more tags kept).
    fn reset(&mut self, (route, slot, rules, offence): (Tag, Option<u16>, BreakerRules, Offence)) {
        self.route = route;
        self.at = [0; MAX_LIMITS];
        self.counts.clear();
        (self.rules, self.offence, self.slot) = (rules, offence, slot);
    }

    /// Counts it under limit `at` of the subject's, whose count `whose`
    /// is: a `key=` value's under its tag (unless the route's; the head of
    /// the route where that is the value's tag), else the client's under
    /// the route's.
    fn count(&mut self, subject: &Subject, counted: (usize, RateLimit, Counted)) {
        let (_, _, whose) = counted;
        match whose {
            // (a spent record's share is counted by table stores only)
            Counted::Client(_) | Counted::Spends(_) => {
                self.count_as(subject, counted, TagOf::Route)
            }
            Counted::Own(value) => match route_head(&self.route, value) {
                Some(head) => self.count_as(subject, counted, head),
                None => self.count_tagged(subject, counted, Some(own_tag(value))),
            },
        }
    }

    /// [`Part::count`], its tag made already (`None`: the route's).
    fn count_tagged(
        &mut self,
        subject: &Subject,
        (at, limit, whose): (usize, RateLimit, Counted),
        tag: Option<Tag>,
    ) {
        match tag.filter(|tag| *tag != self.route) {
            Some(tag) => self.count_under(subject, (at, limit, whose), (TagOf::Route, Some(tag))),
            None => self.count_as(subject, (at, limit, whose), TagOf::Route),
        }
    }

    /// [`Part::count`] under the route or a part of it (`tag`).
    fn count_as(&mut self, subject: &Subject, counted: (usize, RateLimit, Counted), tag: TagOf) {
        self.count_under(subject, counted, (tag, None));
    }

    /// [`Part::count`] under `tag`, or a tag of its own (`Some`).
    #[inline]
    fn count_under(
        &mut self,
        subject: &Subject,
        (at, limit, whose): (usize, RateLimit, Counted),
        (tag, own): (TagOf, Option<Tag>),
    ) {
        if let Some(place) = self.at.get_mut(self.counts.len()) {
            *place = at as u8;
        }
        let count = Count {
            tag,
            limit,
            approx: subject.limits.approx(at),
            own: !matches!(whose, Counted::Own(_)),
            keyed: subject.limits.is_keyed(at),
        };
        self.counts.push(count, own);
    }

    /// A count's hash tag.
    fn tag<'a>(&'a self, c: &'a Count) -> &'a [u8] {
        let route = self.route.as_bytes();
        match c.tag {
            TagOf::Route => route,
            TagOf::RouteHead(n) => route.get(..usize::from(n)).unwrap_or(route),
            TagOf::Other(i) => self.counts.tag(i).map_or(route, |tag| tag),
        }
    }

    /// The part, its route's slot in a Redis Cluster given (`Some`) where
    /// the caller knows it already.
    pub fn in_slot(self, slot: Option<u16>) -> Part {
        Part {
            slot: slot.or(self.slot),
            ..self
        }
    }

    /// The slot of its route in a Redis Cluster.
    pub fn slot(&self) -> u16 {
        self.slot
            .unwrap_or_else(|| generation::slot_of_tag(&self.route))
    }

    /// Whether requests of `self` and `other` share their arguments in a
    /// gathered call ([`Part::set`], without making it). Also what
    /// [`Texts`] are kept by: every input of `part_args`, of a count's key
    /// tail and of the call's start (its counts' number) compared here.
    pub fn same_set(&self, other: &Part) -> bool {
        let same = |a: &Count, b: &Count| (a.limit, a.approx, a.own) == (b.limit, b.approx, b.own);
        self.offence == other.offence
            && self.rules == other.rules
            && self.counts.len() == other.counts.len()
            && self
                .counts
                .iter()
                .zip(other.counts.iter())
                .all(|(a, b)| same(a, b))
    }

    /// What requests in a row share in a gathered call (an order of them).
    pub fn set(&self) -> Set {
        let limits = self.counts.iter().map(|c| {
            let limit = c.limit;
            (limit.requests, limit.window_ms, c.approx, c.own)
        });
        (
            args::offence(self.offence),
            args::rules(self.rules),
            limits.collect(),
        )
    }
}

impl Calls {
    /// The part of every limit the request is counted by (one call: one
    /// Redis, or a Redis Cluster where every count is in the client's
    /// slot).
    pub fn whole(&self, tag: &[u8], subject: &Subject, offence: Offence) -> Part {
        let mut part = Part::default();
        self.whole_in(&mut part, (Tag::from(tag), None), subject, offence);
        part
    }

    /// [`Calls::whole`] made in `part` (what it held before replaced),
    /// routed by the client's `tag` (moved in, not copied), its slot
    /// given where known already (`Some`). (Measured: made, moved and
    /// copied into the box the node keeps it in, two copies of 432
    /// bytes and the old part dropped, some 200 instructions a request.)
    pub fn whole_in(
        &self,
        part: &mut Part,
        (tag, slot): (Tag, Option<u16>),
        subject: &Subject,
        offence: Offence,
    ) {
        part.reset((tag, slot, subject.rules, offence));
        for counted in subject.counted_iter() {
            part.count(subject, counted);
        }
    }

    /// The stacked script's call for `part` (`seq`: the request's member).
    pub fn stacked(&self, part: &Part, seq: u64) -> Call {
        let script = &self.scripts.stacked;
        let mut call = self.with_texts(part, |texts| {
            let mut call = match texts.start() {
                Some(start) => start.again(),
                // (Never: made with the texts.)
                None => {
                    let keys = 3 + 2 * part.counts.len() + usize::from(self.cluster);
                    ScriptCall::new(&script.sha1, keys, 2 + part_words(part))
                }
            };
            self.part_keys(&mut call, part, texts);
            self.slot_key_of(&mut call, || part.slot());
            call.push(|w| self.member(w, seq)).encoded(texts.args());
            call
        });
        call.deadline();
        Call::of(script, call)
    }

    /// `f` of the texts of `part`'s limits (`KeptTexts`: those kept for a
    /// part under the same, else made).
    fn with_texts<R>(&self, part: &Part, f: impl FnOnce(&Texts) -> R) -> R {
        match self.texts.try_borrow_mut() {
            Ok(mut texts) => f(texts.of(part, self.stacked_start())),
            // (Never: nothing calls back into `Calls` while they are
            // made.)
            Err(_) => f(Texts::default().of(part, self.stacked_start())),
        }
    }

    /// The stacked check of each of `parts` (at most
    /// [`super::MAX_GATHERED`], all in one slot; each with its request's
    /// member) in one call, each as the stacked script's. Requests in a
    /// row under the same limits, rules and offence share their
    /// arguments (a set).
    pub fn stacks(&self, parts: &[(&Part, u64)]) -> Call {
        let script = &self.scripts.stacked;
        let sets = parts.chunk_by(|(a, _), (b, _)| a.same_set(b));
        let keys: usize = parts.iter().map(|(p, _)| 3 + 2 * p.counts.len()).sum();
        let set_args: usize = sets.clone().map(|s| 8 + 2 * s[0].0.counts.len()).sum();
        let argc = 2 + set_args + parts.len() + 1;
        let mut call = ScriptCall::new(&script.sha1, keys + usize::from(self.cluster), argc);
        for (part, _) in parts {
            self.with_texts(part, |texts| self.part_keys(&mut call, part, texts));
        }
        if let Some((first, _)) = parts.first() {
            self.slot_key_of(&mut call, || first.slot());
        }
        call.push(|w| w.push(b'*')).num(sets.clone().count() as u64);
        for set in sets {
            let Some((part, _)) = set.first() else {
                continue;
            };
            call.num(set.len() as u64);
            self.with_texts(part, |texts| call.encoded(texts.args()));
        }
        for (_, seq) in parts {
            call.push(|w| self.member(w, *seq));
        }
        call.deadline();
        Call::of(script, call)
    }

    /// A part's call of its own ([`Part::alone`] says which script's;
    /// one Redis, without the part scripts: the one-limit or stacked
    /// script, which answer the same), with its request's member (`seq`).
    pub fn alone(&self, part: &Part, seq: u64) -> Call {
        let check = (part.rules, part.offence, 1, seq);
        let (how, first) = (part.alone(), part.counts.first());
        match (how, first, self.scripts.parts.as_ref()) {
            (Alone::Count | Alone::CountApprox, Some(c), Some(scripts)) => {
                let script = &scripts.count;
                let mut call = ScriptCall::new(&script.sha1, 3, 6);
                self.with_words((c.limit, c.approx), None, |words, _| {
                    self.count_keys_ending(&mut call, (part, c), words.tail());
                    self.slot_key_of(&mut call, || part.slot());
                    call.encoded(words.numbers());
                });
                call.push(|w| self.member(w, seq))
                    .num(args::offence(part.offence))
                    .num(u64::from(c.approx))
                    .deadline();
                Call::of(script, call)
            }
            (Alone::Standing, _, Some(scripts)) => {
                let script = &scripts.standing;
                let prefix = self.prefix.as_bytes();
                let route = part.route.as_bytes();
                let mut call = ScriptCall::new(&script.sha1, 3, 5);
                for which in [ClientKey::Strikes, ClientKey::Trips] {
                    call.push(|w| keys::write(w, prefix, route, which));
                }
                self.slot_key(&mut call, (route, part.slot));
                for rule in args::rules(part.rules) {
                    call.num(rule);
                }
                call.deadline();
                Call::of(script, call)
            }
            (how, Some(c), _) if how.one_limit() => {
                let route = (part.route.as_bytes(), part.slot);
                self.window_check(route, c.limit, c.approx, check)
            }
            _ => self.stacked(part, seq),
        }
    }

    /// The parts of `parts` (at most [`super::MAX_GATHERED`], all in one
    /// slot, each with its request's member) in one call of the counts
    /// script, when each is a part of one count without a breaker
    /// ([`Alone::Count`], [`Alone::CountApprox`]) and this mode has the
    /// script (else `None`: the stacked script's, [`Calls::stacks`]).
    /// Each is answered as the stacked script answers it; requests in a
    /// row under the same limit and offence share their arguments.
    pub fn counts(&self, parts: &[(&Part, u64)]) -> Option<Call> {
        let script = &self.scripts.parts.as_ref()?.counts;
        let mut counts = Vec::with_capacity(parts.len());
        for (part, _) in parts {
            let (Alone::Count | Alone::CountApprox, [c]) = (part.alone(), part.counts.as_slice())
            else {
                return None;
            };
            counts.push((c, part.offence, *part));
        }
        let same = |a: &(&Count, Offence, &Part), b: &(&Count, Offence, &Part)| {
            (a.0.limit, a.0.approx, a.1) == (b.0.limit, b.0.approx, b.1)
        };
        let sets = counts.chunk_by(same);
        let argc = 1 + 5 * sets.clone().count() + parts.len() + 1;
        let mut call = ScriptCall::new(&script.sha1, 2 * parts.len() + 1, argc);
        for &(c, _, part) in &counts {
            self.count_keys(&mut call, (part, c));
        }
        let (first, _) = parts.first()?;
        self.slot_key_of(&mut call, || first.slot());
        call.num(sets.clone().count() as u64);
        for set in sets {
            let Some((c, offence, _)) = set.first() else {
                continue;
            };
            call.num(set.len() as u64)
                .num(c.limit.requests.into())
                .num(c.limit.window_ms)
                .num(args::offence(*offence))
                .num(u64::from(c.approx));
        }
        for (_, seq) in parts {
            call.push(|w| self.member(w, *seq));
        }
        call.deadline();
        Some(Call::of(script, call))
    }

    /// A count's keys: its log or counter, and its refusals, names that
    /// differ in their tail's letter only (`:w:`/`:a:`, `:o:`): the second
    /// copied from the first (measured: each written anew through
    /// `ScriptCall::push` cost some 330 instructions a count, both).
    fn count_keys(&self, call: &mut ScriptCall, (part, c): (&Part, &Count)) {
        let mut room = [0u8; keys::LIMIT_TAIL];
        // (A limit's keys always have a tail.)
        let tail = keys::tail(c.key(), &mut room).unwrap_or_default();
        self.count_keys_ending(call, (part, c), tail);
    }

    /// [`Calls::count_keys`], its log's or counter's tail made already.
    fn count_keys_ending(&self, call: &mut ScriptCall, (part, c): (&Part, &Count), tail: &[u8]) {
        call.keys_differing(self.prefix.as_bytes(), part.tag(c), tail, &[keys::REFUSED]);
    }

    /// A part's keys: its breaker's, then each count's and its refusals
    /// (their tails in `texts`).
    fn part_keys(&self, call: &mut ScriptCall, part: &Part, texts: &Texts) {
        if self.wide_part_keys(call, part, texts) {
            return;
        }
        self.breaker_keys(call, &part.route);
        for (i, c) in part.counts.iter().enumerate() {
            self.count_keys_ending(call, (part, c), texts.tail(i));
        }
    }
}

//! `pow_shield_admin` (docs/operations.md, "Seeing and lifting a block"):
//! the operator's view of one client, decided without nginx: which store
//! keys an admin `key=` names, what the Redis calls are and what their
//! replies say, and the JSON answered.
//!
//! A key names the client as the configuration counts it: an address
//! (`192.0.2.7`, an IPv6 address or its /64 as `$pow_shield_client` writes
//! it, `unix:`) is the default key's client (behind its NUL byte); any text
//! is also a `pow_shield_key` value's (an API key, a `map` result). Each has
//! a dry run's twin (its strikes never block anywhere). A lift clears all
//! of them; the view shows the first.
//!
//! Any key is also read as a `pow_shield_limit ... key=` value (a network
//! such as `198.51.100.0/24`, an AS, `site`): its count under each limit
//! counted by `key=` (`keyed`), which a lift clears (the value starts its
//! windows afresh; a client's own counts stay). [`Lift`] says what one
//! lift clears, [`Answers`] what Redis's replies to one request add up to.

use std::net::IpAddr;

use crate::cluster::calls::Call;
use crate::cluster::keys::{self, ClientKey};
use crate::cluster::scripts::script_sha1;
use crate::limiter::breaker::{Block, BreakerRules, StrikeCounter, BANNED_TRIPS};
use crate::limiter::client::{client_id, DEFAULT_KEY_MARK, OWN_KEY};
use crate::limiter::{LimitName, RateLimit};
use crate::redis::cluster::ClientSlot;
use crate::redis::command::{encode, Tag};
use crate::redis::script_call::ScriptCall;
use crate::store::Counted;

mod json;
pub use json::{error_json, lifted_json, view_json};

/// The longest key accepted (a client key is a header value at most).
pub const MAX_KEY: usize = 4096;

/// What prefixes a dry run's key (`http::handler` counts a dry run under it).
pub const DRY_RUN: &[u8] = b"\0dry\0";

/// Why a request is refused with 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadRequest {
    /// No `key=` argument, or an empty one.
    NoKey,
    /// A `%` not followed by two hex digits.
    Encoding,
    TooLong,
}

impl BadRequest {
    pub fn message(self) -> &'static str {
        match self {
            BadRequest::NoKey => "missing key: ?key=<client key>",
            BadRequest::Encoding => "bad percent-encoding in key",
            BadRequest::TooLong => "key too long",
        }
    }
}

/// The first `key=` argument of a query string, percent-decoded (`+` is a
/// space, as a form sends it).
pub fn key_of_query(args: &[u8]) -> Result<Vec<u8>, BadRequest> {
    let value = args
        .split(|b| *b == b'&')
        .find_map(|arg| arg.strip_prefix(b"key="))
        .filter(|v| !v.is_empty())
        .ok_or(BadRequest::NoKey)?;
    let mut out = Vec::with_capacity(value.len());
    let mut bytes = value.iter().copied();
    while let Some(b) = bytes.next() {
        out.push(match b {
            b'+' => b' ',
            b'%' => {
                let hi = bytes.next().and_then(hex_digit);
                let lo = bytes.next().and_then(hex_digit);
                match (hi, lo) {
                    (Some(hi), Some(lo)) => hi << 4 | lo,
                    _ => return Err(BadRequest::Encoding),
                }
            }
            b => b,
        });
    }
    if out.len() > MAX_KEY {
        return Err(BadRequest::TooLong);
    }
    Ok(out)
}

fn hex_digit(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
}

/// What the admin key names: an address (the default key's client) or a
/// key of the operator's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Named {
    Address,
    Custom,
}

impl Named {
    fn as_str(self) -> &'static str {
        match self {
            Named::Address => "address",
            Named::Custom => "custom",
        }
    }
}

/// The store keys `key` names, the one the view shows first, and what
/// that one is.
pub fn store_keys(key: &[u8]) -> (Vec<Vec<u8>>, Named) {
    let mut keys = Vec::with_capacity(4);
    let named = match address(key) {
        Some(id) => {
            let mut default = vec![DEFAULT_KEY_MARK];
            default.extend_from_slice(id.as_bytes());
            keys.push(default);
            Named::Address
        }
        None => Named::Custom,
    };
    keys.push(key.to_vec());
    let dry: Vec<Vec<u8>> = keys.iter().map(|k| [DRY_RUN, k].concat()).collect();
    keys.extend(dry);
    (keys, named)
}

/// The `key=` values `key` names: itself and its dry run's twin (a dry
/// run counts its `key=` values under the twin, `http::handler`).
pub fn limit_values(key: &[u8]) -> [Vec<u8>; 2] {
    [key.to_vec(), [DRY_RUN, key].concat()]
}

/// A limit counted by its own `key=`, as the view names it: its
/// `name=` (or the name its numbers give), numbers and kind. Limits of
/// the same numbers and kind count a value in one place (the zone's and
/// Redis's keys do not name the `key=`), so the view lists each once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyedLimit {
    pub name: LimitName,
    pub limit: RateLimit,
    pub approx: bool,
}

/// Notes `seen` among the keyed limits the view shows (the first name of
/// each numbers and kind; at most `most`).
pub fn note_keyed(keyed: &mut Vec<KeyedLimit>, seen: KeyedLimit, most: usize) {
    let known = keyed
        .iter()
        .any(|k| k.limit == seen.limit && k.approx == seen.approx);
    if !known && keyed.len() < most {
        keyed.push(seen);
    }
}

/// The (limit, kind) pairs of `keyed`, as the show call reads them.
pub fn counted_as(keyed: &[KeyedLimit]) -> Vec<(RateLimit, bool)> {
    keyed.iter().map(|k| (k.limit, k.approx)).collect()
}

/// What one lift clears: each client reading's breaker (strikes,
/// openings, block, ban; its counts stay), and each `key=` value's count
/// under every keyed limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lift {
    pub breakers: Vec<Vec<u8>>,
    /// Empty when no limit counts by `key=`.
    pub values: Vec<Vec<u8>>,
}

impl Lift {
    /// The lift of `key` where `keyed` limits count by `key=`.
    pub fn of(key: &[u8], keyed: &[KeyedLimit]) -> Lift {
        let values = match keyed.is_empty() {
            true => Vec::new(),
            false => limit_values(key).into(),
        };
        Lift {
            breakers: store_keys(key).0,
            values,
        }
    }

    /// Redis calls it takes: one per breaker and one per value (each its
    /// own slot).
    pub fn calls(&self) -> usize {
        self.breakers.len() + self.values.len()
    }
}

/// `$pow_shield_client` of an address text (an IPv6 /64 written as the
/// variable writes it names its own network).
fn address(key: &[u8]) -> Option<String> {
    let text = core::str::from_utf8(key).ok()?;
    if text == "unix:" {
        return Some(text.to_owned());
    }
    let ip = text.strip_suffix("/64").unwrap_or(text);
    let ip: IpAddr = ip.parse().ok()?;
    if text.ends_with("/64") && !ip.is_ipv6() {
        return None;
    }
    Some(client_id(Some(ip)).as_str().to_owned())
}

/// A client's breaker as a store holds it, times from now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BreakerView {
    pub strikes: u32,
    pub unpaid: u32,
    pub strikes_ms: u64,
    /// Breaker openings counted towards a ban (the ban's marker: banned).
    pub trips: u32,
    pub trips_ms: u64,
}

impl BreakerView {
    /// The zone's counter at `now_ms` (its clock).
    pub fn of_counter(counter: &StrikeCounter, now_ms: u64) -> Self {
        let mut c = *counter;
        c.block(BreakerRules::default(), now_ms);
        BreakerView {
            strikes: c.strikes,
            unpaid: u32::from(c.unpaid),
            strikes_ms: c.strikes_until_ms.saturating_sub(now_ms),
            trips: u32::from(c.trips),
            trips_ms: c.trips_until_ms.saturating_sub(now_ms),
        }
    }

    /// The block under `rules` (the admin location's own strikes and ban,
    /// inherited as any location's) and how long it lasts.
    pub fn block(&self, rules: BreakerRules) -> (Block, u64) {
        let mut c = StrikeCounter {
            strikes: self.strikes,
            trips: u16::try_from(self.trips).unwrap_or(BANNED_TRIPS),
            unpaid: u16::try_from(self.unpaid).unwrap_or(u16::MAX),
            strikes_until_ms: self.strikes_ms,
            trips_until_ms: self.trips_ms,
            confirmed_until_ms: 0,
        };
        let status = c.status(rules, 0);
        (status.block, status.block_ms)
    }
}

/// One limit's count for the client, from a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitView {
    /// A keyed limit's name (the client's limits are listed by numbers).
    pub name: Option<LimitName>,
    pub limit: RateLimit,
    pub approx: bool,
    pub count: u32,
    pub reset_ms: u64,
}

/// What one store holds of the key: as a client (its breaker, its counts
/// under the limits counted per client key) and as a `key=` value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreView {
    pub breaker: BreakerView,
    pub limits: Vec<LimitView>,
    pub keyed: Vec<LimitView>,
}

/// Reads the client's breaker and limits in one Redis (KEYS: strikes,
/// trips, unpaid, then each limit's log or counter; ARGV: each limit's
/// kind, `w` or `a`, and window ms).
pub const SHOW_SCRIPT: &str = include_str!("cluster/scripts/admin_show.lua");

/// The hash tag of `whose` keys: a client's (its keys in `slot`:
/// `keys::client_tag_in`), or a `key=` value's own.
pub fn tag_of(whose: Counted, slot: ClientSlot) -> Tag {
    match whose {
        Counted::Client(key) | Counted::Spends(key) => keys::client_tag_in(key, slot),
        Counted::Own(value) => Tag::of_parts(&[OWN_KEY, value]),
    }
}

/// The show call for `whose` counts under `prefix` (a client's keys in
/// `slot`), for `limits` (a `key=` value has no breaker: its three keys
/// read 0).
pub fn show_call(
    (prefix, slot): (&str, ClientSlot),
    whose: Counted,
    limits: &[(RateLimit, bool)],
) -> Call {
    let tag = tag_of(whose, slot);
    let mut call = ScriptCall::new(
        &script_sha1(SHOW_SCRIPT),
        3 + limits.len(),
        2 * limits.len(),
    );
    let tag = tag.as_bytes();
    let write = |which| move |w: &mut Vec<u8>| keys::write(w, prefix.as_bytes(), tag, which);
    for which in [ClientKey::Strikes, ClientKey::Trips, ClientKey::Unpaid] {
        call.push(write(which));
    }
    for &(limit, approx) in limits {
        call.push(write(match approx {
            true => ClientKey::Approx(limit),
            false => ClientKey::Window(limit),
        }));
    }
    for &(limit, approx) in limits {
        call.push(|w| w.push(if approx { b'a' } else { b'w' }))
            .num(limit.window_ms);
    }
    Call::of_text(SHOW_SCRIPT, call)
}

/// What the show script's reply says; `None`: not its reply.
pub fn show_reply(reply: &[i64], limits: &[(RateLimit, bool)]) -> Option<StoreView> {
    let n = |i: usize| reply.get(i).and_then(|v| u64::try_from(*v).ok());
    if reply.len() != 5 + 2 * limits.len() {
        return None;
    }
    let small = |i| n(i).map(|v| u32::try_from(v).unwrap_or(u32::MAX));
    let breaker = BreakerView {
        strikes: small(0)?,
        strikes_ms: n(1)?,
        trips: small(2)?,
        trips_ms: n(3)?,
        unpaid: small(4)?,
    };
    let mut views = Vec::with_capacity(limits.len());
    for (i, &(limit, approx)) in limits.iter().enumerate() {
        views.push(LimitView {
            name: None,
            limit,
            approx,
            count: small(5 + 2 * i)?,
            reset_ms: n(6 + 2 * i)?,
        });
    }
    Some(StoreView {
        breaker,
        limits: views,
        keyed: Vec::new(),
    })
}

/// A `key=` value's counts as the show call read them (`counts`: its reply's
/// limits, in `keyed`'s order), named.
pub fn keyed_views(counts: &[LimitView], keyed: &[KeyedLimit]) -> Vec<LimitView> {
    counts
        .iter()
        .zip(keyed)
        .map(|(view, k)| LimitView {
            name: Some(k.name),
            ..*view
        })
        .collect()
}

/// The lift of `whose` in one Redis, one `DEL` in its slot: a client's
/// strikes, trips, unpaid strikes and spends waiting for a strike; a
/// `key=` value's logs, counters and refusals under each of `keyed`.
pub fn lift_command(
    (prefix, slot): (&str, ClientSlot),
    whose: Counted,
    keyed: &[(RateLimit, bool)],
) -> Vec<u8> {
    let tag = tag_of(whose, slot);
    let which: Vec<ClientKey> = match whose {
        Counted::Own(_) => keyed
            .iter()
            .flat_map(|&(limit, _)| {
                [
                    ClientKey::Window(limit),
                    ClientKey::Approx(limit),
                    ClientKey::Refused(limit),
                ]
            })
            .collect(),
        _ => vec![
            ClientKey::Strikes,
            ClientKey::Trips,
            ClientKey::Unpaid,
            ClientKey::Paid,
        ],
    };
    let names: Vec<Vec<u8>> = which
        .into_iter()
        .map(|which| {
            let mut w = Vec::new();
            keys::write(&mut w, prefix.as_bytes(), tag.as_bytes(), which);
            w
        })
        .collect();
    let mut words: Vec<&[u8]> = vec![b"DEL"];
    words.extend(names.iter().map(Vec::as_slice));
    let mut out = Vec::new();
    encode(&mut out, &words);
    out
}

/// Redis's part of an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FromRedis {
    /// Local mode: no Redis.
    None,
    Answered(StoreView),
    Lifted,
    Unavailable,
}

/// Which show call a reply answers: the key's as a client, or as a
/// `key=` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Client,
    Keyed,
}

/// Redis's replies to one admin request as they come, and what they add
/// up to once the last is in: a view is Redis's only if every call was
/// answered, a lift done only if every `DEL` was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answers {
    left: usize,
    lift: bool,
    failed: bool,
    view: StoreView,
}

impl Answers {
    /// A view: the client call, and the keyed call when limits count by
    /// `key=`.
    pub fn view(keyed: bool) -> Answers {
        Answers {
            left: 1 + usize::from(keyed),
            lift: false,
            failed: false,
            view: StoreView::default(),
        }
    }

    /// A lift of `calls` commands.
    pub fn lift(calls: usize) -> Answers {
        Answers {
            left: calls,
            lift: true,
            failed: false,
            view: StoreView::default(),
        }
    }

    /// A show call's reply (`None`: Redis did not answer it); `keyed`
    /// names a keyed reply's counts. Redis's answer once the last is in.
    pub fn shown(
        &mut self,
        part: Part,
        view: Option<StoreView>,
        keyed: &[KeyedLimit],
    ) -> Option<FromRedis> {
        match (view, part) {
            (None, _) => self.failed = true,
            (Some(view), Part::Client) => {
                self.view.breaker = view.breaker;
                self.view.limits = view.limits;
            }
            (Some(view), Part::Keyed) => self.view.keyed = keyed_views(&view.limits, keyed),
        }
        self.one_less()
    }

    /// A lift command's reply (`ok`: Redis took it).
    pub fn lifted(&mut self, ok: bool) -> Option<FromRedis> {
        self.failed |= !ok;
        self.one_less()
    }

    fn one_less(&mut self) -> Option<FromRedis> {
        self.left = self.left.saturating_sub(1);
        if self.left > 0 {
            return None;
        }
        Some(match (self.failed, self.lift) {
            (true, _) => FromRedis::Unavailable,
            (false, true) => FromRedis::Lifted,
            (false, false) => FromRedis::Answered(core::mem::take(&mut self.view)),
        })
    }
}

#[cfg(test)]
mod tests;

//! The decision's log lines: one per breaker opening and per ban, always
//! (fail2ban reads them), and the rejections through the worker's
//! [`RejectionLog`] (`pow_shield_log_summary`): the first of a client and
//! reason in full, the rest counted into one summary line per client and
//! interval (a challenge by a keyed limit, a /24's, counted under that
//! limit and value instead of the client: one line per refused /24, not
//! per address a scraper rotates through), written to the location's
//! `error_log` by the request that ends the interval or by a timer that
//! ticks each second while the worker remembers a client (cancelable: it
//! never holds an exiting worker, whose `exit_process` writes what is
//! left).

use core::cell::RefCell;
use core::ptr;

use nginx_sys::{ngx_event_t, ngx_log_t, ngx_uint_t};
use ngx::http::{HttpModuleLocationConf, NgxHttpCoreModule, Request};

use super::request::{client_addr, is_address_key};
use crate::config::Policy;
use crate::ffi::{bytes, monotonic_ms};
use pow_shield_core::decision::{Final, Outcome};
use pow_shield_core::limiter::breaker::{BreakerStatus, Tripped};
use pow_shield_core::log_summary::{
    keyed_values, noted_under, refusing_limit, Kind, RefusedBy, RejectionLog, Summary,
};
use pow_shield_core::store::KeyValues;

/// Clients (and keyed limits' values) a worker remembers (each a few
/// hundred bytes); the oldest is forgotten first, its count written as a
/// summary.
const CLIENTS: usize = 4096;
/// How often the timer looks for intervals that are over.
const TICK_MS: u64 = 1000;
/// The longest client address kept for a summary line (IPv6 with a zone
/// is shorter; a longer one is cut).
const ADDR_MAX: usize = 64;

/// Which line a rejection would write: its reason, a failed solution
/// (`solution rejected: `), a dry run, the limit that refused it (its
/// place among the location's: each limit's first refusal is written).
type Reason = (&'static str, bool, bool, Option<usize>);

/// What a summary line needs: the client's address, the level and log of
/// the location that rejected it last.
#[derive(Clone, Copy)]
struct Client {
    addr: [u8; ADDR_MAX],
    len: usize,
    level: ngx_uint_t,
    /// The location's `error_log` (configuration memory: lives as long as
    /// this worker's cycle).
    log: *mut ngx_log_t,
}

struct Flood {
    log: RejectionLog<Reason, Client>,
    /// The tick; boxed, so its address stays put while nginx holds it.
    tick: Box<ngx_event_t>,
}

thread_local! {
    static FLOOD: RefCell<Option<Flood>> = const { RefCell::new(None) };
}

/// The lines of one decision; `values`: each limit's `key=` value for
/// the request (as evaluated, before a dry run marks it).
pub(super) fn log(r: &Request, policy: &Policy, key: &[u8], values: KeyValues, done: &Final) {
    if let Some(breaker) = done.breaker.filter(|s| s.tripped.is_some()) {
        log_tripped(r, policy, key, breaker);
    }
    if !done.reason.is_empty() {
        log_reject(r, policy, key, values, done);
    } else if done.outcome == Outcome::Solved && policy.log_summary_ms.is_some() {
        // A paid challenge is no rejection in the summary that counted it.
        let _ = FLOOD.try_with(|flood| {
            if let Some(flood) = flood.borrow_mut().as_mut() {
                flood.log.paid(key, keyed_values(&policy.limits, values));
            }
        });
    }
}

fn dry_run_prefix(policy: &Policy) -> &'static str {
    if policy.dry_run {
        "dry run, not enforced: "
    } else {
        ""
    }
}

/// One line per breaker opening and per ban, in a format that stays
/// (fail2ban's filter reads it): `key=address` when the key is the client
/// address (what a firewall can act on): the default key, or a key whose
/// value for this client is its `$pow_shield_client`, `$remote_addr` or
/// `$binary_remote_addr` (directly, or through a `map`/`geo`); else
/// `key=custom` (an API key: banning the address would hit everyone
/// behind it). `for=` is how long the block lasts: the store's word (an
/// earlier strike elsewhere, or a ban, may keep it longer than this
/// location's time). Never summarized.
fn log_tripped(r: &Request, policy: &Policy, key: &[u8], breaker: BreakerStatus) {
    let Some(tripped) = breaker.tripped else {
        return;
    };
    let prefix = dry_run_prefix(policy);
    let client = client_addr(r);
    let by_address = policy.default_key || is_address_key(r, key);
    let kind = if by_address { "address" } else { "custom" };
    let level: ngx_uint_t = policy.breaker_log_level;
    let (strikes, mut block_s) = policy
        .breaker
        .strikes
        .map_or((0, 0), |s| (s.threshold, s.ttl_ms.div_ceil(1000)));
    if breaker.block_ms > 0 {
        block_s = breaker.block_ms.div_ceil(1000);
    }
    log_at!(
        level,
        r.log(),
        "pow_shield: {prefix}breaker opened: client={client} key={kind} strikes={strikes} \
         for={block_s}s"
    );
    if let (Tripped::Banned, Some(ban)) = (tripped, policy.breaker.ban) {
        log_at!(
            level,
            r.log(),
            "pow_shield: {prefix}client banned: client={client} key={kind} openings={} for={}s",
            ban.after,
            block_s.max(ban.ttl_ms.div_ceil(1000))
        );
    }
}

fn log_reject(r: &Request, policy: &Policy, key: &[u8], values: KeyValues, done: &Final) {
    let invalid = done.outcome == Outcome::Invalid;
    let limit = refusing_limit(done);
    let name = limit.map(|i| policy.limits.name(i));
    let by = limit.zip(name.as_ref()).map(|(i, name)| RefusedBy {
        name: name.as_str(),
        key: values.get(i).copied().flatten(),
    });
    let kind = match done.outcome {
        Outcome::Challenge => Kind::Challenge,
        _ => Kind::Rejection,
    };
    if let Some(interval_ms) = policy.log_summary_ms {
        if !first_of_its_count(
            r,
            policy,
            (key, done.outcome, by),
            ((done.reason, invalid, policy.dry_run, limit), kind),
            interval_ms,
        ) {
            return;
        }
    }
    let prefix = dry_run_prefix(policy);
    let what = if invalid { "solution rejected: " } else { "" };
    let level: ngx_uint_t = policy.log_level;
    // Formatted only if the log takes the level (`log_at!`).
    let by = By(by);
    log_at!(
        level,
        r.log(),
        "pow_shield: {prefix}{what}{}{by}",
        done.reason
    );
}

/// `: limit=... key=...`, the limit that refused a request, if any.
struct By<'a>(Option<RefusedBy<'a>>);

impl core::fmt::Display for By<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(by) => write!(f, ": {by}"),
            None => Ok(()),
        }
    }
}

/// Notes the rejection in the worker's log, under its client or the
/// keyed limit that refused it (`noted_under`), and writes the summaries
/// it makes due; true when the rejection's own line is to be written.
fn first_of_its_count(
    r: &Request,
    policy: &Policy,
    (key, outcome, by): (&[u8], Outcome, Option<RefusedBy>),
    reason: (Reason, Kind),
    interval_ms: u64,
) -> bool {
    // SAFETY: a request's connection is live while the request is.
    let text = bytes(unsafe { &(*r.connection()).addr_text });
    let mut client = Client {
        addr: [0; ADDR_MAX],
        len: text.len().min(ADDR_MAX),
        level: policy.log_level,
        log: NgxHttpCoreModule::location_conf(r).map_or(r.log(), |clcf| clcf.error_log),
    };
    client.addr[..client.len].copy_from_slice(&text[..client.len]);
    // An empty key is exempt, never limited; a trap still names the address.
    let id = if key.is_empty() { text } else { key };
    let under = noted_under(outcome, by, id);
    let noted = FLOOD.try_with(|flood| {
        let mut flood = flood.borrow_mut();
        let flood = flood.get_or_insert_with(Flood::new);
        let noted = flood
            .log
            .note_as(under, reason, monotonic_ms(), interval_ms, client);
        flood.arm();
        noted
    });
    let Ok(noted) = noted else {
        return true;
    };
    for summary in noted.summaries.iter().flatten() {
        write_summary(summary);
    }
    noted.write
}

fn write_summary(summary: &Summary<Client>) {
    let Client {
        addr,
        len,
        level,
        log,
    } = summary.tag;
    let addr = String::from_utf8_lossy(&addr[..len]);
    log_at!(level, log, "pow_shield: {}", summary.message(&addr));
}

impl Flood {
    fn new() -> Flood {
        // SAFETY: a zeroed ngx_event_t is nginx's initial event state.
        let mut tick: Box<ngx_event_t> = Box::new(unsafe { core::mem::zeroed() });
        tick.handler = Some(tick_handler);
        // SAFETY: the cycle is live while the worker runs.
        tick.log = unsafe { (*nginx_sys::ngx_cycle).log };
        tick.data = ptr::null_mut();
        tick.set_cancelable(1);
        Flood {
            log: RejectionLog::new(CLIENTS),
            tick,
        }
    }

    /// The tick runs while some client is remembered.
    fn arm(&mut self) {
        if self.log.is_empty() || self.tick.timer_set() != 0 {
            return;
        }
        // SAFETY: the boxed event lives in the worker's FLOOD until the
        // worker exits (`exit_worker` takes it out of the timer tree).
        unsafe { nginx_sys::ngx_add_timer(&mut *self.tick, TICK_MS as nginx_sys::ngx_msec_t) };
    }
}

unsafe extern "C" fn tick_handler(_ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        let mut due = Vec::new();
        let _ = FLOOD.try_with(|flood| {
            if let Some(flood) = flood.borrow_mut().as_mut() {
                flood.log.due(monotonic_ms(), |s| due.push(s));
                flood.arm();
            }
        });
        for summary in &due {
            write_summary(summary);
        }
    })
}

/// `exit_process`: every count left is written, none lost.
pub fn exit_worker() {
    let Ok(Some(mut flood)) = FLOOD.try_with(|f| f.borrow_mut().take()) else {
        return;
    };
    if flood.tick.timer_set() != 0 {
        // SAFETY: the event is ours and in the timer tree.
        unsafe { nginx_sys::ngx_del_timer(&mut *flood.tick) };
    }
    let mut left = Vec::new();
    flood.log.drain(monotonic_ms(), |s| left.push(s));
    for summary in &left {
        write_summary(summary);
    }
}

//! A master found through Redis Sentinel (`sentinel://`, docs/operations.md,
//! "Redis Sentinel"). Commands go to one master connection; the sentinels
//! are asked where the master is, on the event loop:
//!
//! - at start, then while the master is down or unknown (with back-off),
//!   at once after a `-READONLY` reply (it was demoted), after a
//!   `+switch-master` notice of the subscription kept on one sentinel, and
//!   every few seconds anyway;
//! - a connection is used only once its handshake's `ROLE` says master: a
//!   demoted master that comes back as a replica is never written to;
//! - a sentinel that is down, or does not know the master, is skipped for
//!   the next one.
//!
//! Connections are replaced only from the tick event, never from inside a
//! client's own callback (the client is still on the stack there).

use core::cell::{Cell, RefCell, UnsafeCell};
use core::ffi::c_void;
use std::net::{IpAddr, SocketAddr};
use std::rc::{Rc, Weak};

use nginx_sys::{ngx_event_t, ngx_log_t, ngx_msec_t, ngx_ssl_t};
use redis_protocol::resp2::types::OwnedFrame;

use super::addr::OwnedAddr;
use super::client::Resend;
use super::client::{Client, OnReply, PeerName, Reach, Reply, Settings, Tls, Unavailable};
use super::cluster::{OnFrame, Seed};
use super::now;
use super::resolve::NameResolver;
use super::settings::OnPush;
use pow_shield_core::redis::cluster::NodeAddr;
use pow_shield_core::redis::command::encode;
use pow_shield_core::redis::sentinel::{self, AskBackoff, SWITCH_CHANNEL};

/// How long a sentinel may take to answer (it answers from memory).
const SENTINEL_TIMEOUT_MS: ngx_msec_t = 1_000;
/// How often the subscription is checked while nothing else is due.
const TICK_MS: u64 = 1_000;

/// What the master's connections and the sentinels' share.
pub struct SentinelTemplate {
    pub master_name: String,
    pub timeout_ms: ngx_msec_t,
    pub connect_timeout_ms: ngx_msec_t,
    /// The master's handshake (AUTH, SELECT, SCRIPT LOAD); `ROLE` is added.
    pub handshake: Vec<(&'static str, Vec<u8>)>,
    /// The sentinels' handshake (AUTH with `sentinel_password=`).
    pub sentinel_handshake: Vec<(&'static str, Vec<u8>)>,
    pub on_ready: Rc<dyn Fn()>,
    /// TLS context, name to check (`None`: each peer's host) and whether
    /// to verify.
    pub tls: Option<(*mut ngx_ssl_t, Option<String>, bool)>,
    /// nginx's resolver, for sentinels and a master named by host name.
    pub resolver: Option<NameResolver>,
}

struct Master {
    // Dropped first: the client closes before its address goes.
    client: Client,
    addr: NodeAddr,
    _owned: OwnedAddr,
}

pub struct Sentinel {
    template: SentinelTemplate,
    sentinels: Vec<Seed>,
    /// Per sentinel: its outage is logged (its connections are replaced
    /// as the sentinels are asked in turn; each outage is logged once).
    outages: Vec<Rc<Cell<bool>>>,
    master: RefCell<Option<Master>>,
    /// The connection questions go to, and which sentinel it is.
    asking: RefCell<Option<(usize, Client)>>,
    /// The subscription to `+switch-master`, and which sentinel it is on.
    subscribed: RefCell<Option<(usize, Client)>>,
    /// The sentinel to use next.
    next: Cell<usize>,
    /// A question is in flight.
    pending: Cell<bool>,
    /// Ask at the next tick (a READONLY, a notice, a failed question).
    ask_now: Cell<bool>,
    /// The asking connection failed: replace it with the next sentinel's.
    asking_stale: Cell<bool>,
    /// An address a sentinel gave, to switch to at the next tick, and
    /// whether it is news to trust over a master that answers (a
    /// `+switch-master` notice, an answer after `-READONLY`); an answer to
    /// a question is not: a sentinel that has not heard of the failover yet
    /// still names the old master.
    wanted: RefCell<Option<(NodeAddr, bool)>>,
    /// The master answered `-READONLY`: the next answer is trusted.
    demoted: Cell<bool>,
    backoff: RefCell<AskBackoff>,
    /// When the sentinels are asked next (nginx's clock).
    ask_at: Cell<ngx_msec_t>,
    /// The master answered at the last tick.
    was_healthy: Cell<bool>,
    /// "does not know the master" logged (until a sentinel knows it).
    unknown_logged: Cell<bool>,
    /// The last master refused for want of a `resolver` (logged once per
    /// name, not at every answer).
    unresolvable: RefCell<Option<NodeAddr>>,
    tick_ev: UnsafeCell<ngx_event_t>,
    log: *mut ngx_log_t,
    closing: Cell<bool>,
    me: Weak<Sentinel>,
}

impl Sentinel {
    /// Asks the sentinels for the master and subscribes to failovers
    /// (without waiting).
    pub fn start(
        template: SentinelTemplate,
        sentinels: Vec<Seed>,
        log: *mut ngx_log_t,
    ) -> Rc<Sentinel> {
        let s = Rc::new_cyclic(|me| Sentinel {
            template,
            outages: sentinels
                .iter()
                .map(|_| Rc::new(Cell::new(false)))
                .collect(),
            sentinels,
            master: RefCell::new(None),
            asking: RefCell::new(None),
            subscribed: RefCell::new(None),
            next: Cell::new(0),
            pending: Cell::new(false),
            ask_now: Cell::new(true),
            asking_stale: Cell::new(false),
            wanted: RefCell::new(None),
            demoted: Cell::new(false),
            backoff: RefCell::new(AskBackoff::default()),
            ask_at: Cell::new(now()),
            was_healthy: Cell::new(false),
            unknown_logged: Cell::new(false),
            unresolvable: RefCell::new(None),
            // SAFETY: a zeroed ngx_event_t is nginx's initial event state.
            tick_ev: UnsafeCell::new(unsafe { core::mem::zeroed() }),
            log,
            closing: Cell::new(false),
            me: me.clone(),
        });
        let data: *mut c_void = Rc::as_ptr(&s).cast_mut().cast();
        // SAFETY: our event, not yet known to nginx; `data` lives as long
        // as it is registered (shutdown removes it). Cancelable: it must
        // not hold a worker that is shutting down.
        unsafe {
            let ev = s.tick_ev.get();
            (*ev).data = data;
            (*ev).handler = Some(tick_handler);
            (*ev).log = log;
            (*ev).set_cancelable(1);
        }
        s.tick();
        s
    }

    /// Sends a command to the master; refused at once while it is down or
    /// not known yet.
    pub(super) fn submit(&self, command: Resend, on_reply: OnFrame) -> Result<(), Unavailable> {
        let master = self.master.try_borrow().map_err(|_| Unavailable::Down)?;
        let Some(master) = master.as_ref() else {
            return Err(Unavailable::Down);
        };
        let me = self.me.clone();
        master.client.submit(
            command.bytes(),
            Some(command.clone()),
            OnReply::Call(Box::new(move |reply: &Reply| {
                if let Reply::Error(text) = reply {
                    if text.starts_with("READONLY") {
                        // Demoted: ask where the master went.
                        if let Some(s) = me.upgrade() {
                            s.demoted.set(true);
                            s.ask_soon();
                        }
                    }
                }
                on_reply.deliver(reply.frame())
            })),
        )
    }

    /// While the master is down or unknown: milliseconds until it is tried.
    pub(super) fn retry_in_ms(&self) -> Option<u64> {
        match self.master.try_borrow().ok()?.as_ref() {
            Some(master) => master.client.retry_in_ms(),
            None => Some((self.ask_at.get().wrapping_sub(now()) as i64).max(0) as u64),
        }
    }

    pub(super) fn is_healthy(&self) -> bool {
        self.master
            .try_borrow()
            .ok()
            .and_then(|m| m.as_ref().map(|m| m.client.is_healthy()))
            .unwrap_or(false)
    }

    /// The master's connection's (down while no master is known).
    pub(super) fn reach(&self) -> Reach {
        self.master
            .try_borrow()
            .ok()
            .and_then(|m| m.as_ref().map(|m| m.client.reach()))
            .unwrap_or(Reach::Down)
    }

    /// Whether an unpaid refusal counts a strike now (the master's).
    pub(super) fn strikes_unpaid(&self) -> bool {
        self.master
            .try_borrow()
            .ok()
            .and_then(|m| m.as_ref().map(|m| m.client.strikes_unpaid()))
            .unwrap_or(true)
    }

    /// Closes every connection and cancels the tick (worker exit).
    pub(super) fn shutdown(&self) {
        if self.closing.replace(true) {
            return;
        }
        // SAFETY: our own event, removed before the struct goes.
        unsafe {
            let ev = self.tick_ev.get();
            if (*ev).timer_set() != 0 {
                nginx_sys::ngx_del_timer(ev);
            }
            if (*ev).posted() != 0 {
                nginx_sys::ngx_delete_posted_event(ev);
            }
        }
        let taken = (
            self.master.try_borrow_mut().ok().and_then(|mut m| m.take()),
            self.asking.try_borrow_mut().ok().and_then(|mut a| a.take()),
            self.subscribed
                .try_borrow_mut()
                .ok()
                .and_then(|mut a| a.take()),
        );
        if let Some(m) = &taken.0 {
            m.client.shutdown();
        }
        for (_, client) in [taken.1, taken.2].into_iter().flatten() {
            client.shutdown();
        }
    }

    /// Runs the tick from the posted queue (never from a client callback).
    fn ask_soon(&self) {
        self.ask_now.set(true);
        self.post_tick();
    }

    fn post_tick(&self) {
        if self.closing.get() {
            return;
        }
        // SAFETY: our event; posting is idempotent while queued.
        unsafe {
            let ev = self.tick_ev.get();
            if (*ev).posted() == 0 {
                nginx_sys::ngx_post_event(
                    ev,
                    core::ptr::addr_of_mut!(nginx_sys::ngx_posted_events),
                );
            }
        }
    }

    /// Everything that replaces a connection or asks a question.
    fn tick(&self) {
        if self.closing.get() {
            return;
        }
        let wanted = self.wanted.borrow_mut().take();
        if let Some((addr, trusted)) = wanted {
            self.use_master(addr, trusted);
        }
        self.keep_subscription();
        if self.asking_stale.replace(false) {
            let stale = self.asking.borrow_mut().take();
            if let Some((_, client)) = stale {
                client.shutdown();
            }
        }
        let healthy = self.is_healthy();
        if self.was_healthy.replace(healthy) && !healthy {
            // The master just failed: where is it now?
            self.ask_now.set(true);
        }
        let due = (now().wrapping_sub(self.ask_at.get()) as i64) >= 0;
        if !self.pending.get() && (self.ask_now.get() || due) {
            self.ask_now.set(false);
            self.ask();
            let wait = self.backoff.borrow_mut().next(healthy);
            self.ask_at.set(now().wrapping_add(wait as ngx_msec_t));
        }
        let until_ask = (self.ask_at.get().wrapping_sub(now()) as i64).max(1) as u64;
        // SAFETY: our event; nginx owns the timer tree.
        unsafe {
            let ev = self.tick_ev.get();
            if (*ev).timer_set() != 0 {
                nginx_sys::ngx_del_timer(ev);
            }
            nginx_sys::ngx_add_timer(ev, until_ask.min(TICK_MS) as ngx_msec_t);
        }
    }

    /// Asks the current sentinel where the master is.
    fn ask(&self) {
        let mut asking = self.asking.borrow_mut();
        if asking.is_none() {
            let i = self.rotate();
            *asking = self.sentinel_client(i, None).map(|c| (i, c));
        }
        let Some((i, client)) = asking.as_ref() else {
            return;
        };
        let i = *i;
        let mut question = Vec::new();
        encode(
            &mut question,
            &[
                b"SENTINEL",
                b"get-master-addr-by-name",
                self.template.master_name.as_bytes(),
            ],
        );
        let me = self.me.clone();
        let sent = client.submit(
            &question,
            None,
            OnReply::Call(Box::new(move |reply| {
                if let Some(s) = me.upgrade() {
                    s.answered(i, reply);
                }
            })),
        );
        match sent {
            Ok(()) => self.pending.set(true),
            Err(_) => {
                // That sentinel is down: the next one, at the next tick.
                self.asking_stale.set(true);
                self.ask_now.set(true);
            }
        }
    }

    /// A sentinel's answer (from its client's callback: only flags and the
    /// wanted address are set here; the tick acts on them).
    fn answered(&self, i: usize, reply: &Reply) {
        self.pending.set(false);
        let name = &self.template.master_name;
        let sentinel = self.sentinel_name(i);
        let answer = match reply {
            Reply::Frame(frame) => sentinel::master_addr(&frame.as_owned()),
            Reply::Error(text) => Err(text.clone()),
            Reply::Failed => Err("no answer".to_owned()),
        };
        match answer {
            Ok(Some(addr)) => {
                self.unknown_logged.set(false);
                let trusted = self.demoted.replace(false);
                *self.wanted.borrow_mut() = Some((addr, trusted));
            }
            Ok(None) => {
                if !self.unknown_logged.replace(true) {
                    error!(
                        self.log,
                        "pow_shield: redis sentinel {sentinel} does not know master \"{name}\"; \
                         asking the other sentinels"
                    );
                }
                self.asking_stale.set(true);
            }
            Err(why) => {
                debug!(
                    self.log,
                    "pow_shield: redis sentinel {sentinel} did not say where \"{name}\" is: {}",
                    super::exchange::printable(&why)
                );
                self.asking_stale.set(true);
            }
        }
        self.post_tick();
    }

    /// A `+switch-master` notice (from the subscription's callback).
    fn notice(&self, message: &OwnedFrame) {
        if let Some(addr) = sentinel::switched_to(message, &self.template.master_name) {
            *self.wanted.borrow_mut() = Some((addr, true));
            // Asked as well: the notice may be stale by the time it's read.
            self.ask_soon();
        }
    }

    /// Connects to the master a sentinel named, if it is not the one used
    /// and the one used does not answer (unless the news is `trusted`).
    fn use_master(&self, addr: NodeAddr, trusted: bool) {
        let current = self
            .master
            .borrow()
            .as_ref()
            .map(|m| (m.addr.clone(), m.client.is_healthy()));
        match &current {
            Some((at, _)) if *at == addr => return,
            Some((at, true)) if !trusted => {
                debug!(
                    self.log,
                    "pow_shield: redis sentinel named {addr} for \"{}\"; {at} answers: kept",
                    self.template.master_name
                );
                return;
            }
            _ => {}
        }
        let Some(fresh) = self.master_client(&addr) else {
            return;
        };
        let name = &self.template.master_name;
        match &current {
            Some((old, _)) => notice!(
                self.log,
                "pow_shield: redis sentinel: master \"{name}\" switched from {old} to {addr}"
            ),
            None => notice!(
                self.log,
                "pow_shield: redis sentinel: master \"{name}\" is at {addr}"
            ),
        }
        let old = self.master.borrow_mut().replace(fresh);
        if let Some(old) = old {
            // Its requests in flight are decided by pow_shield_fail.
            old.client.set_serving(false);
            old.client.shutdown();
        }
    }

    fn master_client(&self, addr: &NodeAddr) -> Option<Master> {
        let resolve = NameResolver::for_host(self.template.resolver, &addr.host, addr.port);
        let ip = match addr.host.parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) if resolve.is_some() => Some(IpAddr::from([0, 0, 0, 0])),
            Err(_) => None,
        };
        let Some(ip) = ip else {
            let mut refused = self.unresolvable.borrow_mut();
            if refused.as_ref() != Some(addr) {
                error!(
                    self.log,
                    "pow_shield: redis sentinel: master \"{}\" is announced by name ({addr}); \
                     a \"resolver\" is needed to use it (requests are decided by \
                     pow_shield_fail meanwhile)",
                    self.template.master_name
                );
                *refused = Some(addr.clone());
            }
            return None;
        };
        self.unresolvable.borrow_mut().take();
        let mut owned = OwnedAddr::new(SocketAddr::new(ip, addr.port), &addr.to_string());
        let t = &self.template;
        let mut handshake = t.handshake.clone();
        let mut role = Vec::new();
        encode(&mut role, &[b"ROLE"]);
        // After AUTH (ROLE needs it), before the scripts are loaded.
        let at = handshake
            .iter()
            .position(|(label, _)| *label != "AUTH")
            .unwrap_or(handshake.len());
        handshake.insert(at, (pow_shield_core::redis::pipeline::ROLE_STEP, role));
        let ready = t.on_ready.clone();
        let settings = Settings {
            addr: owned.ngx_addr(),
            name: format!("{addr} (master \"{}\")", t.master_name),
            timeout_ms: t.timeout_ms,
            connect_timeout_ms: t.connect_timeout_ms,
            handshake,
            on_ready: Some(Box::new(move || ready())),
            tls: self.tls(&addr.host)?,
            cluster: false,
            on_push: None,
            resolve,
            outage: None,
        };
        Some(Master {
            client: Client::start(settings, self.log),
            addr: addr.clone(),
            _owned: owned,
        })
    }

    /// Keeps one subscription to `+switch-master` open, moving on to the
    /// next sentinel when its sentinel is gone.
    fn keep_subscription(&self) {
        let lost = match self.subscribed.borrow().as_ref() {
            Some((_, client)) => !client.is_connected(),
            None => true,
        };
        if !lost {
            return;
        }
        let old = self.subscribed.borrow_mut().take();
        if let Some((_, client)) = old {
            client.shutdown();
        }
        let me = self.me.clone();
        let on_push: OnPush = Rc::new(move |message| {
            if let Some(s) = me.upgrade() {
                s.notice(message);
            }
        });
        let i = self.rotate();
        let fresh = self.sentinel_client(i, Some(on_push));
        *self.subscribed.borrow_mut() = fresh.map(|c| (i, c));
    }

    /// The next sentinel, in turn.
    fn rotate(&self) -> usize {
        let n = self.sentinels.len().max(1);
        let i = self.next.get() % n;
        self.next.set((i + 1) % n);
        i
    }

    fn sentinel_name(&self, i: usize) -> String {
        self.sentinels
            .get(i)
            .map_or_else(|| "?".to_owned(), |s| s.node.to_string())
    }

    /// A connection to sentinel `i`; with `on_push`, one that subscribes.
    fn sentinel_client(&self, i: usize, on_push: Option<OnPush>) -> Option<Client> {
        let seed = self.sentinels.get(i)?;
        let t = &self.template;
        let mut handshake = t.sentinel_handshake.clone();
        if on_push.is_some() {
            let mut subscribe = Vec::new();
            encode(&mut subscribe, &[b"SUBSCRIBE", SWITCH_CHANNEL.as_bytes()]);
            handshake.push(("SUBSCRIBE", subscribe));
        }
        let settings = Settings {
            addr: seed.addr,
            name: format!("sentinel {}", seed.node),
            timeout_ms: SENTINEL_TIMEOUT_MS.max(t.timeout_ms),
            connect_timeout_ms: t.connect_timeout_ms,
            handshake,
            on_ready: None,
            tls: self.tls(&seed.node.host)?,
            cluster: false,
            on_push,
            resolve: NameResolver::for_host(t.resolver, &seed.node.host, seed.node.port),
            outage: self.outages.get(i).cloned(),
        };
        let client = Client::start(settings, self.log);
        // Requests don't depend on a sentinel: not in the fallback gauge.
        client.set_serving(false);
        Some(client)
    }

    /// The TLS settings for a peer at `host` (`Some(None)`: no TLS).
    fn tls(&self, host: &str) -> Option<Option<Tls>> {
        match &self.template.tls {
            Some((ssl, name, verify)) => Some(Some(Tls {
                ssl: *ssl,
                name: PeerName::new(name.as_deref().unwrap_or(host))?,
                verify: *verify,
            })),
            None => Some(None),
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.shutdown();
    }
}

unsafe extern "C" fn tick_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: our tick event carries the Sentinel (see `start`), alive
        // while the event is registered; exiting workers stop asking.
        let (s, exiting) = unsafe {
            (
                &*(*ev).data.cast::<Sentinel>(),
                nginx_sys::ngx_exiting != 0 || nginx_sys::ngx_terminate != 0,
            )
        };
        if !exiting {
            s.tick();
        }
    })
}

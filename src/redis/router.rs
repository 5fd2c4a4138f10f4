//! Where each command goes: the one Redis, or in a Redis Cluster the
//! master serving its key's slot (one connection per master per worker).
//!
//! The slot map comes from `CLUSTER SLOTS`, asked of any node at start, after
//! a `MOVED` and while a master is unavailable (with back-off). Until it is
//! known, commands go to the first seed, whose `MOVED` says where they
//! belong. A `MOVED` or `ASK` re-sends the command where it points (`ASK`
//! after `ASKING`, once); `TRYAGAIN` (a slot half migrated) re-sends it a
//! little later. A master that is down fails only the commands of its own
//! slots: they are decided by `pow_shield_fail`; the others go on. A node
//! the cluster announced and the map no longer names is retired (see
//! `Roster`): addresses come and go (pods), connections must not pile up.

use core::cell::{Cell, RefCell, UnsafeCell};
use core::ffi::c_void;
use core::ptr;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::rc::{Rc, Weak};

use nginx_sys::{ngx_addr_t, ngx_event_t, ngx_log_t, ngx_msec_t, ngx_ssl_t, ngx_str_t};
use redis_protocol::resp2::types::OwnedFrame;

use super::client::{Client, PeerName, Reply, Resend, Settings, Tls, Unavailable};
use pow_shield_core::redis::cluster::{
    key_slot, parse_redirect, parse_slots, NodeAddr, Place, Redirect, Roster, Routes,
};
use pow_shield_core::redis::command::encode;

/// What a command's sender gets: the reply, or `None` if Redis failed it.
pub type OnFrame = Box<dyn FnOnce(Option<OwnedFrame>)>;

/// Builds the command to send instead when a node answers `NOSCRIPT`
/// (a command may be sent to several nodes, so it can be built again).
pub type Rebuild = Rc<dyn Fn() -> Vec<u8>>;

/// How long a command waits after `TRYAGAIN`, and how many times it
/// follows redirections (a migration of one slot lasts well under this).
const TRYAGAIN_MS: ngx_msec_t = 20;
const MAX_HOPS: u8 = 25;
/// Commands waiting to be tried again, at most (beyond: decided by
/// `pow_shield_fail`, like commands beyond a connection's cap).
const MAX_RETRIES: usize = super::client::MAX_IN_FLIGHT;
/// Node connections per worker, at most (seeds included): beyond, an
/// announced node's slots are decided by `pow_shield_fail` until an entry
/// is retired (see `Roster`).
const MAX_NODES: usize = 64;
/// Slot map refresh back-off while nothing changes (a master down).
const REFRESH_FIRST_MS: ngx_msec_t = 100;
const REFRESH_MAX_MS: ngx_msec_t = 2_000;

/// What every connection of a cluster shares.
pub struct NodeTemplate {
    pub timeout_ms: ngx_msec_t,
    pub connect_timeout_ms: ngx_msec_t,
    pub handshake: Vec<(&'static str, Vec<u8>)>,
    pub on_ready: Rc<dyn Fn()>,
    /// TLS context, name to check (`None`: each node's host) and whether
    /// to verify.
    pub tls: Option<(*mut ngx_ssl_t, Option<String>, bool)>,
}

/// A seed node from the configuration, resolved there.
pub struct Seed {
    pub node: NodeAddr,
    pub addr: ngx_addr_t,
}

pub enum Router {
    Single(Client),
    Cluster(Rc<Cluster>),
}

impl Router {
    /// Sends `command`, whose keys share `key`'s slot; `on_reply` runs from
    /// the event loop. Refused at once if the node for that slot is down.
    pub fn submit(
        &self,
        key: &[u8],
        command: Vec<u8>,
        rebuild: Option<Rebuild>,
        on_reply: OnFrame,
    ) -> Result<(), Unavailable> {
        match self {
            Router::Single(client) => {
                let resend = rebuild.map(|r| Box::new(move || r()) as Resend);
                client.submit(&command, resend, Box::new(move |r| on_reply(r.frame())))
            }
            Router::Cluster(cluster) => cluster.submit(Job {
                slot: key_slot(key),
                command: Rc::new(command),
                rebuild,
                on_reply,
                hops: 0,
                deadline: now().wrapping_add(cluster.template.timeout_ms),
            }),
        }
    }

    /// While Redis (some master) is down: milliseconds until it is tried.
    pub fn retry_in_ms(&self) -> Option<u64> {
        match self {
            Router::Single(client) => client.retry_in_ms(),
            Router::Cluster(cluster) => cluster
                .each_client(Client::retry_in_ms)
                .into_iter()
                .flatten()
                .min(),
        }
    }

    /// Whether a command may be sent now (to some node).
    pub fn is_healthy(&self) -> bool {
        match self {
            Router::Single(client) => client.is_healthy(),
            Router::Cluster(cluster) => cluster.each_client(Client::is_healthy).contains(&true),
        }
    }

    pub fn shutdown(&self) {
        match self {
            Router::Single(client) => client.shutdown(),
            Router::Cluster(cluster) => cluster.shutdown(),
        }
    }
}

/// A command on its way, possibly redirected.
struct Job {
    slot: u16,
    command: Rc<Vec<u8>>,
    rebuild: Option<Rebuild>,
    on_reply: OnFrame,
    hops: u8,
    /// The first send's deadline: no redirection is followed after it, so
    /// a request waits at most its timeout plus one more (the last hop).
    deadline: ngx_msec_t,
}

struct Node {
    // Dropped first: the client closes its connection before the address
    // it points at goes.
    client: Client,
    addr: NodeAddr,
    _owned: Option<OwnedAddr>,
}

/// A socket address built at run time for a node the cluster announced.
struct OwnedAddr {
    sockaddr: Box<libc::sockaddr_storage>,
    name: Box<[u8]>,
}

pub struct Cluster {
    template: NodeTemplate,
    nodes: RefCell<Vec<Node>>,
    /// Which of `nodes` are live, by the same indexes.
    roster: RefCell<Roster>,
    routes: RefCell<Routes>,
    retries: RefCell<VecDeque<(ngx_msec_t, Job)>>,
    refreshing: Cell<bool>,
    refresh_ms: Cell<ngx_msec_t>,
    /// Nodes to ask for the map, in turn.
    next_asked: Cell<usize>,
    refresh_ev: UnsafeCell<ngx_event_t>,
    retry_ev: UnsafeCell<ngx_event_t>,
    log: *mut ngx_log_t,
    closing: Cell<bool>,
    /// The last map error logged (logged once until the map is read again).
    map_error: Cell<bool>,
    /// Nodes announced by name, logged once while the map names them.
    named_logged: RefCell<Vec<NodeAddr>>,
    /// `MAX_NODES` reached (logged once).
    full_logged: Cell<bool>,
    me: Weak<Cluster>,
}

impl Cluster {
    /// Connects to the seeds and asks for the slot map (without waiting).
    pub fn start(template: NodeTemplate, seeds: Vec<Seed>, log: *mut ngx_log_t) -> Rc<Cluster> {
        let cluster = Rc::new_cyclic(|me| Cluster {
            template,
            nodes: RefCell::new(Vec::new()),
            roster: RefCell::new(Roster::new(MAX_NODES)),
            routes: RefCell::new(Routes::default()),
            retries: RefCell::new(VecDeque::new()),
            refreshing: Cell::new(false),
            refresh_ms: Cell::new(1),
            next_asked: Cell::new(0),
            // SAFETY: a zeroed ngx_event_t is nginx's initial event state.
            refresh_ev: UnsafeCell::new(unsafe { core::mem::zeroed() }),
            retry_ev: UnsafeCell::new(unsafe { core::mem::zeroed() }),
            log,
            closing: Cell::new(false),
            map_error: Cell::new(false),
            named_logged: RefCell::new(Vec::new()),
            full_logged: Cell::new(false),
            me: me.clone(),
        });
        let data: *mut c_void = Rc::as_ptr(&cluster).cast_mut().cast();
        for (ev, handler) in [
            (
                cluster.refresh_ev.get(),
                refresh_handler as unsafe extern "C" fn(*mut ngx_event_t),
            ),
            (cluster.retry_ev.get(), retry_handler),
        ] {
            // SAFETY: our events, not yet known to nginx; `data` lives as
            // long as they are registered (shutdown removes them).
            unsafe {
                (*ev).data = data;
                (*ev).handler = Some(handler);
                (*ev).log = log;
            }
        }
        // Map refreshes must not hold a worker that is shutting down; the
        // retry timer must (it lasts TRYAGAIN_MS and requests wait on it:
        // nginx exits a worker whose timers are all cancelable, leaving
        // them unanswered).
        // SAFETY: as above.
        unsafe { (*cluster.refresh_ev.get()).set_cancelable(1) };
        {
            let mut nodes = cluster.nodes.borrow_mut();
            let mut roster = cluster.roster.borrow_mut();
            for seed in seeds {
                if let Some(client) = cluster.connect(&seed.node, seed.addr) {
                    roster.add_seed(seed.node.clone());
                    nodes.push(Node {
                        client,
                        addr: seed.node,
                        _owned: None,
                    });
                }
            }
        }
        cluster.request_refresh();
        cluster
    }

    fn each_client<T>(&self, f: impl Fn(&Client) -> T) -> Vec<T> {
        match self.nodes.try_borrow() {
            Ok(nodes) => nodes.iter().map(|n| f(&n.client)).collect(),
            Err(_) => Vec::new(),
        }
    }

    fn connect(&self, node: &NodeAddr, addr: ngx_addr_t) -> Option<Client> {
        let t = &self.template;
        let tls = match &t.tls {
            Some((ssl, name, verify)) => Some(Tls {
                ssl: *ssl,
                name: PeerName::new(name.as_deref().unwrap_or(&node.host))?,
                verify: *verify,
            }),
            None => None,
        };
        let ready = t.on_ready.clone();
        let settings = Settings {
            addr,
            name: node.to_string(),
            timeout_ms: t.timeout_ms,
            connect_timeout_ms: t.connect_timeout_ms,
            handshake: t.handshake.clone(),
            on_ready: Some(Box::new(move || ready())),
            tls,
            cluster: true,
        };
        Some(Client::start(settings, self.log))
    }

    /// The index of a node's connection, made on first use (or again for
    /// a retired node). `None` for a node announced by a host name
    /// (resolving it would block) or beyond `MAX_NODES`.
    fn node_index(&self, node: &NodeAddr) -> Option<usize> {
        let place = self.roster.try_borrow().ok()?.place(node);
        if let Place::Live(i) = place {
            return Some(i);
        }
        let Ok(ip) = node.host.parse::<IpAddr>() else {
            self.log_named(node);
            return None;
        };
        let (Place::Revive(i) | Place::New(i) | Place::Reuse(i)) = place else {
            if !self.full_logged.replace(true) {
                error!(
                    self.log,
                    "pow_shield: redis cluster: {MAX_NODES} nodes known, none retired; the \
                     slots of {node} and further new nodes are decided by \"pow_shield_fail\""
                );
            }
            return None;
        };
        let mut owned = OwnedAddr::new(SocketAddr::new(ip, node.port), &node.to_string());
        let addr = owned.ngx_addr();
        let client = self.connect(node, addr)?;
        let fresh = Node {
            client,
            addr: node.clone(),
            _owned: Some(owned),
        };
        let replaced = {
            let mut nodes = self.nodes.try_borrow_mut().ok()?;
            let mut roster = self.roster.try_borrow_mut().ok()?;
            let replaced = if i < nodes.len() {
                Some(core::mem::replace(&mut nodes[i], fresh))
            } else if i == nodes.len() {
                nodes.push(fresh);
                None
            } else {
                return None;
            };
            roster.placed(i, node);
            replaced
        };
        // A retired node's client, already shut down; dropped unborrowed.
        drop(replaced);
        Some(i)
    }

    /// A node announced by name: logged once while the map names it (with
    /// `cluster-preferred-endpoint-type hostname` every request meets it).
    fn log_named(&self, node: &NodeAddr) {
        let Ok(mut logged) = self.named_logged.try_borrow_mut() else {
            return;
        };
        if logged.contains(node) {
            return;
        }
        logged.push(node.clone());
        error!(
            self.log,
            "pow_shield: redis cluster node {node} is announced by name; only addresses \
             are used (set cluster-announce-ip); its slots are decided by \"pow_shield_fail\""
        );
    }

    fn submit(&self, job: Job) -> Result<(), Unavailable> {
        let target = self.target(job.slot);
        self.send(job, target, false).map_err(|(_, why)| why)
    }

    /// The node for a slot: its master, or while unknown any node that is
    /// up (its `MOVED` will tell).
    fn target(&self, slot: u16) -> usize {
        if let Some(owner) = self.routes.try_borrow().ok().and_then(|r| r.owner(slot)) {
            return owner;
        }
        self.each_client(Client::is_healthy)
            .iter()
            .position(|up| *up)
            .unwrap_or(0)
    }

    /// Sends a job to node `target`; gives it back if that node refuses.
    fn send(&self, job: Job, target: usize, asking: bool) -> Result<(), (Job, Unavailable)> {
        let down = |job| Err((job, Unavailable::Down));
        if self.closing.get() {
            return down(job);
        }
        let Ok(nodes) = self.nodes.try_borrow() else {
            return down(job);
        };
        let Some(node) = nodes.get(target) else {
            return down(job);
        };
        let resend = job.rebuild.clone().map(|r| Box::new(move || r()) as Resend);
        let command = job.command.clone();
        // The job comes back if the client refuses it at once.
        let held = Rc::new(Cell::new(Some(job)));
        let in_reply = held.clone();
        let me = self.me.clone();
        let on_reply = Box::new(move |reply: Reply| {
            if let Some(job) = in_reply.take() {
                match me.upgrade() {
                    Some(cluster) => cluster.on_reply(job, reply),
                    None => (job.on_reply)(None),
                }
            }
        });
        // ASKING and its command go together or not at all: a lone ASKING
        // would apply to the next, unrelated, command on the connection.
        let sent = if asking {
            node.client.submit_asking(&command, resend, on_reply)
        } else {
            node.client.submit(&command, resend, on_reply)
        };
        drop(nodes);
        match sent {
            Ok(()) => Ok(()),
            Err(why) => {
                // A node with a full queue is busy, not down.
                if why == Unavailable::Down {
                    self.node_down();
                }
                // Refused at once: the callback was dropped unused.
                match held.take() {
                    Some(job) => Err((job, why)),
                    None => Ok(()),
                }
            }
        }
    }

    fn on_reply(&self, mut job: Job, reply: Reply) {
        let Reply::Error(text) = &reply else {
            return (job.on_reply)(reply.frame());
        };
        let redirect = match parse_redirect(text) {
            Some(redirect) if job.hops < MAX_HOPS && !self.closing.get() && !past(job.deadline) => {
                redirect
            }
            _ => return (job.on_reply)(None),
        };
        job.hops += 1;
        let sent = match redirect {
            Redirect::Moved { slot, node } => {
                self.request_refresh();
                match self.node_index(&node) {
                    Some(i) => {
                        if let Ok(mut routes) = self.routes.try_borrow_mut() {
                            routes.set(slot, i);
                        }
                        self.send(job, i, false)
                    }
                    None => Err((job, Unavailable::Down)),
                }
            }
            Redirect::Ask { node, .. } => match self.node_index(&node) {
                Some(i) => self.send(job, i, true),
                None => Err((job, Unavailable::Down)),
            },
            Redirect::TryAgain => {
                self.retry_later(job);
                Ok(())
            }
        };
        if let Err((job, _)) = sent {
            (job.on_reply)(None);
        }
    }

    fn retry_later(&self, job: Job) {
        let due = now().wrapping_add(TRYAGAIN_MS);
        if past_at(job.deadline, due) {
            return (job.on_reply)(None);
        }
        match self.retries.try_borrow_mut() {
            Ok(mut retries) if retries.len() < MAX_RETRIES => retries.push_back((due, job)),
            _ => return (job.on_reply)(None),
        }
        // SAFETY: our retry event; nginx owns the timer tree.
        unsafe {
            let ev = self.retry_ev.get();
            if (*ev).timer_set() == 0 {
                nginx_sys::ngx_add_timer(ev, TRYAGAIN_MS);
            }
        }
    }

    fn on_retry(&self) {
        let now = now();
        let mut due = Vec::new();
        let mut next = None;
        if let Ok(mut retries) = self.retries.try_borrow_mut() {
            while let Some((at, _)) = retries.front() {
                if (now.wrapping_sub(*at) as isize) < 0 {
                    next = Some(at.wrapping_sub(now));
                    break;
                }
                if let Some((_, job)) = retries.pop_front() {
                    due.push(job);
                }
            }
        }
        for job in due {
            let target = self.target(job.slot);
            if let Err((job, _)) = self.send(job, target, false) {
                (job.on_reply)(None);
            }
        }
        if let Some(left) = next {
            // SAFETY: our retry event.
            unsafe { nginx_sys::ngx_add_timer(self.retry_ev.get(), left.max(1)) };
        }
    }

    /// A master refused a command (down): the map may have changed.
    fn node_down(&self) {
        self.request_refresh();
    }

    /// Asks for the map soon, unless a request is already on its way.
    fn request_refresh(&self) {
        if self.refreshing.get() || self.closing.get() {
            return;
        }
        // SAFETY: our refresh event.
        unsafe {
            let ev = self.refresh_ev.get();
            if (*ev).timer_set() == 0 {
                nginx_sys::ngx_add_timer(ev, self.refresh_ms.get());
            }
        }
    }

    fn refresh(&self) {
        if self.closing.get() {
            return;
        }
        let mut command = Vec::new();
        encode(&mut command, &[b"CLUSTER", b"SLOTS"]);
        let count = self.nodes.borrow().len();
        for _ in 0..count {
            let i = self.next_asked.get() % count.max(1);
            self.next_asked.set(i + 1);
            let nodes = self.nodes.borrow();
            let Some(node) = nodes.get(i) else {
                continue;
            };
            if !node.client.is_healthy() {
                continue;
            }
            let me = self.me.clone();
            let host = node.addr.host.clone();
            let on_reply = Box::new(move |reply: Reply| {
                if let Some(cluster) = me.upgrade() {
                    cluster.on_map(reply, &host);
                }
            });
            if node.client.submit_topology(&command, on_reply).is_ok() {
                self.refreshing.set(true);
                return;
            }
        }
        // No node to ask: later.
        self.backoff();
        self.request_refresh();
    }

    fn backoff(&self) {
        let next = (self.refresh_ms.get() * 2).clamp(REFRESH_FIRST_MS, REFRESH_MAX_MS);
        self.refresh_ms.set(next);
    }

    fn on_map(&self, reply: Reply, seen_from: &str) {
        self.refreshing.set(false);
        let read = match &reply {
            Reply::Frame(frame) => Some(parse_slots(frame, seen_from).map_err(str::to_owned)),
            // e.g. a Redis without cluster support: commands still go to
            // the seed, which then answers them itself.
            Reply::Error(text) => {
                let text: String = text
                    .chars()
                    .take(200)
                    .map(|c| if c.is_control() { '?' } else { c })
                    .collect();
                Some(Err(format!("CLUSTER SLOTS refused: {text}")))
            }
            Reply::Failed => None,
        };
        let ranges = match read {
            Some(Ok(ranges)) => ranges,
            Some(Err(why)) => {
                if !self.map_error.replace(true) {
                    error!(self.log, "pow_shield: redis cluster map unreadable: {why}");
                }
                self.backoff();
                self.request_refresh();
                return;
            }
            None => {
                // The node failed or refused: ask another one later.
                self.backoff();
                self.request_refresh();
                return;
            }
        };
        self.map_error.set(false);
        if let Ok(mut logged) = self.named_logged.try_borrow_mut() {
            logged.retain(|name| ranges.iter().any(|r| r.master == *name));
        }
        let indexes: Vec<Option<usize>> =
            ranges.iter().map(|r| self.node_index(&r.master)).collect();
        let usable: Vec<_> = ranges
            .into_iter()
            .zip(&indexes)
            .filter(|(_, i)| i.is_some())
            .map(|(r, _)| r)
            .collect();
        let changed = {
            let mut routes = self.routes.borrow_mut();
            let mut at = indexes.iter().flatten();
            routes.replace(&usable, |_| at.next().copied().unwrap_or(0))
        };
        // Only nodes that own slots are depended on (the fallback gauge).
        if let Ok(nodes) = self.nodes.try_borrow() {
            for (i, node) in nodes.iter().enumerate() {
                node.client.set_serving(indexes.contains(&Some(i)));
            }
        }
        self.retire_absent(&indexes);
        if changed {
            let masters = {
                let mut m: Vec<_> = usable.iter().map(|r| r.master.to_string()).collect();
                m.sort();
                m.dedup();
                m
            };
            notice!(
                self.log,
                "pow_shield: redis cluster map: {} slot ranges on {} masters ({})",
                usable.len(),
                masters.len(),
                masters.join(" ")
            );
            self.refresh_ms.set(1);
        } else {
            // Unchanged (a master down, no failover yet): ask less often.
            self.backoff();
        }
    }

    /// Closes, for good, the connections of announced nodes the map no
    /// longer names (down, or absent for a while): they would otherwise
    /// be reconnected every 2 s forever. Their indexes stay (see `Roster`).
    fn retire_absent(&self, indexes: &[Option<usize>]) {
        let Ok(nodes) = self.nodes.try_borrow() else {
            return;
        };
        let retired = match self.roster.try_borrow_mut() {
            Ok(mut roster) => roster.on_map(
                |i| indexes.contains(&Some(i)),
                |i| nodes.get(i).is_some_and(|n| !n.client.is_healthy()),
            ),
            Err(_) => return,
        };
        for i in retired {
            if let Some(node) = nodes.get(i) {
                notice!(
                    self.log,
                    "pow_shield: redis cluster node {} is no longer in the map; its \
                     connection is closed",
                    node.addr
                );
                node.client.shutdown();
            }
        }
    }

    fn shutdown(&self) {
        if self.closing.replace(true) {
            return;
        }
        // SAFETY: our own events, removed before the cluster goes.
        unsafe {
            for ev in [self.refresh_ev.get(), self.retry_ev.get()] {
                if (*ev).timer_set() != 0 {
                    nginx_sys::ngx_del_timer(ev);
                }
            }
        }
        let waiting: Vec<Job> = self
            .retries
            .try_borrow_mut()
            .map(|mut r| r.drain(..).map(|(_, job)| job).collect())
            .unwrap_or_default();
        for job in waiting {
            crate::ffi::guard((), || (job.on_reply)(None));
        }
        let clients: Vec<Node> = self
            .nodes
            .try_borrow_mut()
            .map(|mut n| n.drain(..).collect())
            .unwrap_or_default();
        for node in &clients {
            node.client.shutdown();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl OwnedAddr {
    fn new(addr: SocketAddr, name: &str) -> OwnedAddr {
        // SAFETY: an all-zero sockaddr_storage is a valid (unspecified) one.
        let mut storage: Box<libc::sockaddr_storage> = Box::new(unsafe { core::mem::zeroed() });
        let p: *mut libc::sockaddr_storage = &mut *storage;
        match addr {
            SocketAddr::V4(v4) => {
                let sin = p.cast::<libc::sockaddr_in>();
                // SAFETY: sockaddr_storage is large and aligned enough for
                // any socket address.
                unsafe {
                    (*sin).sin_family = libc::AF_INET as libc::sa_family_t;
                    (*sin).sin_port = v4.port().to_be();
                    (*sin).sin_addr.s_addr = u32::from(*v4.ip()).to_be();
                }
            }
            SocketAddr::V6(v6) => {
                let sin6 = p.cast::<libc::sockaddr_in6>();
                // SAFETY: as above.
                unsafe {
                    (*sin6).sin6_family = libc::AF_INET6 as libc::sa_family_t;
                    (*sin6).sin6_port = v6.port().to_be();
                    (*sin6).sin6_addr.s6_addr = v6.ip().octets();
                }
            }
        }
        OwnedAddr {
            sockaddr: storage,
            name: name.as_bytes().into(),
        }
    }

    /// An nginx address pointing into this one (valid while it lives).
    fn ngx_addr(&mut self) -> ngx_addr_t {
        let socklen = match self.sockaddr.ss_family as i32 {
            libc::AF_INET6 => core::mem::size_of::<libc::sockaddr_in6>(),
            _ => core::mem::size_of::<libc::sockaddr_in>(),
        };
        ngx_addr_t {
            sockaddr: ptr::from_mut(&mut *self.sockaddr).cast(),
            socklen: socklen as libc::socklen_t,
            name: ngx_str_t {
                len: self.name.len(),
                data: self.name.as_ptr().cast_mut(),
            },
        }
    }
}

fn now() -> ngx_msec_t {
    // SAFETY: nginx's cached monotonic millisecond clock; single-threaded.
    unsafe { nginx_sys::ngx_current_msec }
}

/// Whether `deadline` has passed by `at` (wrapping millisecond clock).
fn past_at(deadline: ngx_msec_t, at: ngx_msec_t) -> bool {
    (at.wrapping_sub(deadline) as isize) > 0
}

fn past(deadline: ngx_msec_t) -> bool {
    past_at(deadline, now())
}

/// Recovers the cluster from an event's data.
///
/// # Safety
/// `data` is the `Cluster` pointer set in `start`, alive while its events
/// are registered.
unsafe fn cluster<'a>(data: *mut c_void) -> &'a Cluster {
    // SAFETY: per the contract.
    unsafe { &*data.cast::<Cluster>() }
}

unsafe extern "C" fn refresh_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: our refresh event carries the cluster.
        let (cluster, exiting) = unsafe {
            (
                cluster((*ev).data),
                nginx_sys::ngx_exiting != 0 || nginx_sys::ngx_terminate != 0,
            )
        };
        if !exiting {
            cluster.refresh();
        }
    })
}

unsafe extern "C" fn retry_handler(ev: *mut ngx_event_t) {
    crate::ffi::guard((), || {
        // SAFETY: our retry event carries the cluster.
        let cluster = unsafe { cluster((*ev).data) };
        cluster.on_retry();
    })
}

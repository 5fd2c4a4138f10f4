//! A Redis Cluster: each command goes to the master serving its key's slot
//! (one connection per master per worker).
//!
//! - `nodes`: the connections, one per node, made on first use; a node the
//!   cluster announced and the map no longer names is retired (see
//!   `Roster`): addresses come and go (pods), connections must not pile up.
//! - `routing`: slot → node. Until the map is known, commands go to the
//!   first seed, whose `MOVED` says where they belong. A `MOVED` or `ASK`
//!   re-sends the command where it points (`ASK` after `ASKING`, once);
//!   `TRYAGAIN` (a slot half migrated) re-sends it a little later. A master
//!   that is down fails only the commands of its own slots: they are
//!   decided by `pow_shield_fail`; the others go on.
//! - `topology`: the slot map, from `CLUSTER SLOTS` asked of any node at
//!   start, after a `MOVED` and while a master is unavailable (with
//!   back-off).

mod nodes;
mod routing;
mod topology;

use core::cell::{Cell, RefCell, UnsafeCell};
use core::ffi::c_void;
use std::rc::{Rc, Weak};

use nginx_sys::{ngx_addr_t, ngx_event_t, ngx_log_t, ngx_msec_t, ngx_ssl_t};

use self::nodes::{Node, MAX_NODES};
use self::routing::{retry_handler, Job, Jobs, MAX_RETRIES};
use self::topology::refresh_handler;
use super::resolve::NameResolver;
use pow_shield_core::redis::cluster::{NodeAddr, Roster, Routes};
use pow_shield_core::redis::retries::{RefreshBackoff, Retries};

pub use crate::redis::client::OnFrame;

/// What every connection of a cluster shares.
pub struct NodeTemplate {
    pub timeout_ms: ngx_msec_t,
    pub connect_timeout_ms: ngx_msec_t,
    pub handshake: Vec<(&'static str, Vec<u8>)>,
    pub on_ready: Rc<dyn Fn()>,
    /// TLS context, name to check (`None`: each node's host) and whether
    /// to verify.
    pub tls: Option<(*mut ngx_ssl_t, Option<String>, bool)>,
    /// nginx's resolver, for nodes named by host name (seeds, and nodes
    /// the cluster announces by name); `None`: such nodes are not used.
    pub resolver: Option<NameResolver>,
}

/// A seed node from the configuration, resolved there.
pub struct Seed {
    pub node: NodeAddr,
    pub addr: ngx_addr_t,
}

pub struct Cluster {
    template: NodeTemplate,
    nodes: RefCell<Vec<Node>>,
    /// Which of `nodes` are live, by the same indexes.
    roster: RefCell<Roster>,
    routes: RefCell<Routes>,
    /// Commands queued on the nodes' connections, waiting for their reply.
    jobs: RefCell<Jobs>,
    /// Commands answered `TRYAGAIN`, waiting for `retry_ev`.
    retries: RefCell<Retries<Job>>,
    refreshing: Cell<bool>,
    /// How long `request_refresh` waits to ask for the map.
    refresh_wait: Cell<RefreshBackoff>,
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
    /// Lines logged for names since the map last named none; beyond
    /// `MAX_NAMED_LOGGED`, one more (`named_full_logged`) and then none.
    named_lines: Cell<usize>,
    named_full_logged: Cell<bool>,
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
            jobs: RefCell::default(),
            retries: RefCell::new(Retries::new(MAX_RETRIES)),
            refreshing: Cell::new(false),
            refresh_wait: Cell::new(RefreshBackoff::default()),
            next_asked: Cell::new(0),
            // SAFETY: a zeroed ngx_event_t is nginx's initial event state.
            refresh_ev: UnsafeCell::new(unsafe { core::mem::zeroed() }),
            retry_ev: UnsafeCell::new(unsafe { core::mem::zeroed() }),
            log,
            closing: Cell::new(false),
            map_error: Cell::new(false),
            named_logged: RefCell::new(Vec::new()),
            full_logged: Cell::new(false),
            named_lines: Cell::new(0),
            named_full_logged: Cell::new(false),
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
        cluster.add_seeds(seeds);
        cluster.request_refresh();
        cluster
    }

    /// Fails what waits, closes every connection and cancels the events
    /// (worker exit).
    pub fn shutdown(&self) {
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
        self.fail_retries();
        self.close_nodes();
        self.fail_jobs();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown();
    }
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

//! The cluster's nodes: one client per node, made on first use (seeds at
//! start, announced masters when the map or a redirection names them), and
//! retired for good once the map no longer names them (see `Roster`).
//! A node announced by host name is resolved by its client with nginx's
//! resolver on the event loop when the http block has a `resolver`;
//! without one it is not used (never a blocking lookup in a worker).

use std::net::{IpAddr, SocketAddr};

use nginx_sys::ngx_addr_t;

use super::{Cluster, Seed};
use crate::redis::addr::OwnedAddr;
use crate::redis::client::{Client, PeerName, Settings, Tls};
use crate::redis::resolve::NameResolver;
use pow_shield_core::redis::cluster::{NodeAddr, Place};

/// Node connections per worker, at most (seeds included): beyond, an
/// announced node's slots are decided by `pow_shield_fail` until an entry
/// is retired (see `Roster`).
pub(super) const MAX_NODES: usize = 64;
// Every node's index fits the slot table's byte.
const _: () = assert!(MAX_NODES <= pow_shield_core::redis::cluster::Routes::MAX_NODE);

/// Node names logged per worker (see `log_named`).
pub(super) const MAX_NAMED_LOGGED: usize = 16;

pub(super) struct Node {
    // Dropped first: the client closes its connection before the address
    // it points at goes.
    pub(super) client: Client,
    pub(super) addr: NodeAddr,
    _owned: Option<OwnedAddr>,
}

impl Cluster {
    /// While some master is down: milliseconds until one is tried again.
    pub(in crate::redis) fn retry_in_ms(&self) -> Option<u64> {
        self.each_client(Client::retry_in_ms)
            .into_iter()
            .flatten()
            .min()
    }

    /// Whether some node is up.
    pub(in crate::redis) fn is_healthy(&self) -> bool {
        // (Asked on every check: no list made. Every node asked, not up to
        // the first healthy one: asking follows what other workers found of
        // that node, dropping or reconnecting its connection.)
        match self.nodes.try_borrow() {
            Ok(nodes) => nodes.iter().fold(false, |up, n| n.client.is_healthy() | up),
            Err(_) => false,
        }
    }

    pub(super) fn each_client<T>(&self, f: impl Fn(&Client) -> T) -> Vec<T> {
        match self.nodes.try_borrow() {
            Ok(nodes) => nodes.iter().map(|n| f(&n.client)).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Connects to the configured seeds.
    pub(super) fn add_seeds(&self, seeds: Vec<Seed>) {
        let mut nodes = self.nodes.borrow_mut();
        let mut roster = self.roster.borrow_mut();
        for seed in seeds {
            if let Some(client) = self.connect(&seed.node, seed.addr) {
                roster.add_seed(seed.node.clone());
                nodes.push(Node {
                    client,
                    addr: seed.node,
                    _owned: None,
                });
            }
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
            on_push: None,
            resolve: NameResolver::for_host(t.resolver, &node.host, node.port),
            outage: None,
        };
        Some(Client::start(settings, self.log))
    }

    /// The index of a node's connection, made on first use (or again for
    /// a retired node). `None` for a node announced by a host name when
    /// there is no `resolver` (a lookup here would block), or beyond
    /// `MAX_NODES`.
    pub(super) fn node_index(&self, node: &NodeAddr) -> Option<usize> {
        let place = self.roster.try_borrow().ok()?.place(node);
        if let Place::Live(i) = place {
            return Some(i);
        }
        let ip = match node.host.parse::<IpAddr>() {
            Ok(ip) => ip,
            // Resolved by the client on the event loop.
            Err(_) if self.template.resolver.is_some() => IpAddr::from([0, 0, 0, 0]),
            Err(_) => {
                self.log_named(node);
                return None;
            }
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
    /// At most `MAX_NAMED_LOGGED` lines until the map names no node by
    /// name again: a node inventing new names in its redirections logs one
    /// line more, then nothing, and the list of names stays short.
    fn log_named(&self, node: &NodeAddr) {
        let Ok(mut logged) = self.named_logged.try_borrow_mut() else {
            return;
        };
        if logged.contains(node) {
            return;
        }
        if self.named_lines.get() >= MAX_NAMED_LOGGED {
            if !self.named_full_logged.replace(true) {
                error!(
                    self.log,
                    "pow_shield: redis cluster: more than {MAX_NAMED_LOGGED} nodes announced \
                     by name (latest: {node}); further ones are not logged, their slots are \
                     decided by \"pow_shield_fail\""
                );
            }
            return;
        }
        logged.push(node.clone());
        self.named_lines.set(self.named_lines.get() + 1);
        error!(
            self.log,
            "pow_shield: redis cluster node {node} is announced by name; only addresses \
             are used (set cluster-announce-ip); its slots are decided by \"pow_shield_fail\""
        );
    }

    /// Only nodes that own slots (at `indexes`) are depended on: the
    /// fallback gauge counts those that are down.
    pub(super) fn set_serving(&self, indexes: &[Option<usize>]) {
        if let Ok(nodes) = self.nodes.try_borrow() {
            for (i, node) in nodes.iter().enumerate() {
                node.client.set_serving(indexes.contains(&Some(i)));
            }
        }
    }

    /// Closes, for good, the connections of announced nodes the map no
    /// longer names (down, or absent for a while): they would otherwise
    /// be reconnected every 2 s forever. Their indexes stay (see `Roster`).
    pub(super) fn retire_absent(&self, indexes: &[Option<usize>]) {
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

    /// Closes every node's connection (worker exit).
    pub(super) fn close_nodes(&self) {
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

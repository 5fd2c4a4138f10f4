//! How one connection reaches Redis and what it says first: what the
//! router gives each client it starts (a single Redis, a cluster node, a
//! sentinel or the master it names).

use core::cell::Cell;
use std::rc::Rc;

use nginx_sys::{ngx_addr_t, ngx_msec_t, ngx_ssl_t};
use redis_protocol::resp2::types::OwnedFrame;

use super::resolve::Resolve;
use super::tls::PeerName;

/// What a subscribed connection hands each message to.
pub type OnPush = Rc<dyn Fn(&OwnedFrame)>;

/// How to reach Redis and what to say first on every new connection.
pub struct Settings {
    /// A copy of the resolved address (configuration pool memory).
    pub addr: ngx_addr_t,
    /// For log lines: `host:port` or `unix:/path`.
    pub name: String,
    pub timeout_ms: ngx_msec_t,
    pub connect_timeout_ms: ngx_msec_t,
    /// Encoded commands sent first on each connection (AUTH, SELECT, SCRIPT
    /// LOAD), with a label for the log if Redis refuses one.
    pub handshake: Vec<(&'static str, Vec<u8>)>,
    /// Runs after each connection's handshake succeeded (outside the
    /// client's state, so it may submit).
    pub on_ready: Option<Box<dyn Fn()>>,
    /// `rediss://`: TLS on every connection.
    pub tls: Option<Tls>,
    /// A Redis Cluster node: redirections (MOVED, ASK, TRYAGAIN) are for
    /// the router to follow, not errors to log.
    pub cluster: bool,
    /// A connection that subscribes in its handshake: each message goes
    /// here (outside the client's state).
    pub on_push: Option<OnPush>,
    /// A host name resolved at run time (`addr` is then not used).
    pub resolve: Option<Resolve>,
    /// A sentinel's connection (asked in turn with the others): requests
    /// do not depend on it, and this flag, shared by the connections that
    /// replace one another to that sentinel, says its outage is logged
    /// already. Each outage is then logged once, and its end once, not
    /// once per connection.
    pub outage: Option<Rc<Cell<bool>>>,
}

/// TLS settings of a connection.
pub struct Tls {
    /// The context built from the configuration (configuration pool).
    pub ssl: *mut ngx_ssl_t,
    /// Checked against the certificate and sent as SNI.
    pub name: PeerName,
    /// `tls_verify`: check the chain and the name.
    pub verify: bool,
}

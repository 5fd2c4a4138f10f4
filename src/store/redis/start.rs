//! A worker's Redis store starts: the handshake every connection sends
//! (AUTH, SELECT, every script of the mode loaded), and the router of the
//! deployment (one Redis, Sentinel, or a Redis Cluster), whose connections
//! come up without the worker waiting.

use core::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use nginx_sys::ngx_log_t;

use super::timer::BatchTimer;
use super::{NodeCache, RedisStore};
use crate::config::RedisConf;
use crate::redis::client::{Client, PeerName, Settings, Tls};
use crate::redis::resolve::NameResolver;
use crate::redis::router::{Cluster, NodeTemplate, Router, Seed, Sentinel, SentinelTemplate};
use pow_shield_core::cluster::calls::Calls;
use pow_shield_core::cluster::node::ClusterNode;
use pow_shield_core::redis::command::encode;
use pow_shield_core::redis::url::{tls_name, RedisAddr};

impl RedisStore {
    /// Connects (without waiting) and returns the store.
    pub fn start(
        conf: &RedisConf,
        cache: Option<NodeCache>,
        log: *mut ngx_log_t,
    ) -> Option<Rc<Self>> {
        let target = &conf.target;
        let mut node = [0u8; 8];
        getrandom::getrandom(&mut node).ok()?;
        let node_id = u64::from_le_bytes(node);
        let calls = Calls::new(
            &conf.options.prefix,
            node_id,
            std::process::id(),
            conf.options.cluster,
        )
        .with_client_slot(conf.options.slot);
        let client_slot = calls.client_slot();
        let handshake = calls.handshake(target);

        let tls = match tls_name(target, &conf.options) {
            Some(name) if !conf.ssl.is_null() => Some(Tls {
                ssl: conf.ssl,
                name: PeerName::new(name)?,
                verify: conf.options.tls.verify,
            }),
            _ => None,
        };

        Some(Rc::new_cyclic(|me: &Weak<RedisStore>| {
            let ready = me.clone();
            let on_ready = move || {
                if let Some(store) = ready.upgrade() {
                    store.on_connected();
                }
            };
            let tls_template = (!conf.ssl.is_null()).then(|| {
                (
                    conf.ssl,
                    conf.options.tls.name.clone(),
                    conf.options.tls.verify,
                )
            });
            let router = if let Some(sentinels) = &target.sentinel {
                let mut sentinel_handshake = Vec::new();
                if let Some(password) = &conf.options.sentinel_password {
                    let mut auth = Vec::new();
                    encode(&mut auth, &[b"AUTH", password.0.as_bytes()]);
                    sentinel_handshake.push(("AUTH", auth));
                }
                let template = SentinelTemplate {
                    master_name: sentinels.master.clone(),
                    timeout_ms: conf.options.timeout_ms as usize,
                    connect_timeout_ms: conf.options.connect_timeout_ms as usize,
                    handshake,
                    sentinel_handshake,
                    on_ready: Rc::new(on_ready),
                    tls: tls_template,
                    resolver: conf.resolver,
                };
                Router::Sentinel(Sentinel::start(template, seeds(conf), log))
            } else if conf.options.cluster {
                let template = NodeTemplate {
                    timeout_ms: conf.options.timeout_ms as usize,
                    connect_timeout_ms: conf.options.connect_timeout_ms as usize,
                    handshake,
                    on_ready: Rc::new(on_ready),
                    tls: tls_template,
                    resolver: conf.resolver,
                };
                Router::Cluster(Cluster::start(template, seeds(conf), log))
            } else {
                let settings = Settings {
                    addr: conf.addr,
                    name: conf.display.clone(),
                    timeout_ms: conf.options.timeout_ms as usize,
                    connect_timeout_ms: conf.options.connect_timeout_ms as usize,
                    handshake,
                    on_ready: Some(Box::new(on_ready)),
                    tls,
                    cluster: false,
                    on_push: None,
                    resolve: match &target.addr {
                        RedisAddr::Tcp { host, port } => {
                            NameResolver::for_host(conf.resolver, host, *port)
                        }
                        RedisAddr::Unix { .. } => None,
                    },
                    outage: None,
                };
                Router::Single(Client::start(settings, log))
            };
            let local_generation = cache.as_ref().map_or(node_id >> 11, NodeCache::zone_id);
            let scope = pow_shield_core::cluster::refusals::scope(&[
                conf.display.as_bytes(),
                &target.db.to_le_bytes(),
                conf.options.prefix.as_bytes(),
            ]);
            RedisStore {
                router,
                node: RefCell::new(ClusterNode::new(calls, scope, local_generation, node_id)),
                refusal_keys: Default::default(),
                cache,
                batch_timer: BatchTimer::new(),
                spare_steps: Default::default(),
                kept_calls: Default::default(),
                next_kept: Cell::new(0),
                client_slot,
                log,
                me: me.clone(),
            }
        }))
        .inspect(|store| store.batch_timer.attach(store, log))
    }
}

/// The configured nodes (a cluster's seeds, the sentinels), resolved.
fn seeds(conf: &RedisConf) -> Vec<Seed> {
    conf.seeds
        .iter()
        .map(|(node, addr)| Seed {
            node: node.clone(),
            addr: *addr,
        })
        .collect()
}

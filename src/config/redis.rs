//! `pow_shield_redis`: the words are parsed and checked by
//! `pow_shield_core::config::redis`; here the addresses are resolved with
//! nginx's URL parser and the TLS context is made, so that `nginx -t`
//! fails on an unknown host or a missing file. Host names are resolved
//! again at run time with the http block's `resolver` (nginx's own,
//! asynchronous); without one, `nginx -t` says that they are not.

use core::ptr;

use nginx_sys::{ngx_addr_t, ngx_conf_t, ngx_str_t, ngx_url_t};
use pow_shield_core::config::redis::{self as words, TlsFault};
use pow_shield_core::redis::cluster::NodeAddr;
use pow_shield_core::redis::url::{RedisAddr, RedisOptions, RedisTarget};
use std::net::IpAddr;

use super::setters::{full_path, setter, Directive, DirectiveError};
use super::{ConfAt, MainConf};

/// Redis settings of `pow_shield_redis`.
pub struct RedisConf {
    pub target: RedisTarget,
    /// The address resolved at configuration time (nginx resolves names
    /// once, like `proxy_pass` without a resolver).
    pub addr: ngx_addr_t,
    pub options: RedisOptions,
    /// The `host:port` or `unix:` text, for log lines.
    pub display: String,
    /// `rediss://`: the TLS context (configuration pool; null without TLS).
    pub ssl: *mut nginx_sys::ngx_ssl_t,
    /// Every URL's node, resolved (with `cluster`: the seed nodes; with
    /// `sentinel://`: the sentinels).
    pub seeds: Vec<(NodeAddr, ngx_addr_t)>,
    /// The http block's `resolver`, for host names (and nodes a cluster or
    /// the sentinels announce by name) at run time; `None`: names are
    /// resolved once, when the configuration is loaded.
    pub resolver: Option<Resolver>,
    /// Where the directive is, for the warnings about names and `slot=`.
    pub(super) at: Option<ConfAt>,
    /// A name that did not resolve when the directive was read (the URL as
    /// shown, and why): an error unless there is a `resolver`.
    unresolved: Option<(String, String)>,
}

/// nginx's asynchronous resolver (the `resolver` directive).
pub use crate::redis::resolve::NameResolver as Resolver;

setter!(set_redis, MainConf, |d, mcf| {
    if mcf.redis.is_some() {
        return Err(DirectiveError::Duplicate);
    }
    let url = d.value();
    let Some(parsed) = words::parse(&d.args)? else {
        mcf.redis = Some(None);
        return Ok(());
    };
    // Refusals show the URL with any password hidden.
    let shown = parsed.shown.clone();
    // A name that does not resolve now may with the http block's
    // `resolver` (known once the block is read: see `adopt_resolver`).
    let mut unresolved = None;
    let mut resolve_or_defer = |cf: &mut ngx_conf_t, host: &str, text: &str| {
        match resolve(cf, text) {
            Ok(addr) => Ok(addr),
            Err(why) if host.parse::<IpAddr>().is_err() => {
                unresolved.get_or_insert_with(|| (shown.clone(), why));
                // An empty address, never connected to: the name is
                // resolved at run time, or the configuration is refused.
                Ok(ngx_addr_t {
                    sockaddr: ptr::null_mut(),
                    socklen: 0,
                    name: ngx_str_t {
                        len: 0,
                        data: ptr::null_mut(),
                    },
                })
            }
            Err(why) => Err(DirectiveError::invalid(&shown, why)),
        }
    };
    let mut seeds = Vec::with_capacity(parsed.targets.len());
    for node in parsed.nodes() {
        let addr = resolve_or_defer(d.cf, &node.host, &node.to_string())?;
        seeds.push((node, addr));
    }
    let options_args = d.args.get(1..).unwrap_or_default();
    let (target, options, display) = parsed.into_target(url, options_args)?;
    let host = match &target.addr {
        RedisAddr::Tcp { host, .. } => host.clone(),
        RedisAddr::Unix { .. } => String::new(),
    };
    let addr = if host.is_empty() {
        resolve(d.cf, &display).map_err(|e| DirectiveError::invalid(&shown, e))?
    } else {
        resolve_or_defer(d.cf, &host, &display)?
    };
    let ssl = if target.tls {
        tls_context(d, &shown, &options)?
    } else {
        ptr::null_mut()
    };
    mcf.redis = Some(Some(RedisConf {
        target,
        addr,
        options,
        display,
        ssl,
        seeds,
        resolver: None,
        at: ConfAt::of(d.cf),
        unresolved,
    }));
    Ok(())
});

impl RedisConf {
    /// The host names of the URL (not addresses).
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .seeds
            .iter()
            .map(|(node, _)| node.host.clone())
            .chain(match &self.target.addr {
                RedisAddr::Tcp { host, .. } => Some(host.clone()),
                RedisAddr::Unix { .. } => None,
            })
            .filter(|host| host.parse::<IpAddr>().is_err())
            .collect();
        names.dedup();
        names
    }
}

/// After the http block is read: takes its `resolver` for run time, or
/// warns (once) that the URL's host names are resolved only now; without
/// one, a name that did not resolve is refused (as it always was):
/// false then (the error is logged).
pub fn adopt_resolver(cf: &mut ngx_conf_t, conf: &mut RedisConf) -> bool {
    // SAFETY: at the end of the http block, cf->ctx is its context and
    // loc_conf[core] the http-level core location configuration.
    let (resolver, timeout) = unsafe {
        let ctx = cf.ctx.cast::<nginx_sys::ngx_http_conf_ctx_t>();
        let index = nginx_sys::ngx_http_core_module.ctx_index;
        let clcf = (*(*ctx).loc_conf.add(index)).cast::<nginx_sys::ngx_http_core_loc_conf_t>();
        match clcf.as_ref() {
            Some(clcf) => (clcf.resolver, clcf.resolver_timeout),
            None => (ptr::null_mut(), 0),
        }
    };
    // Without a `resolver`, nginx has put a dummy one (no name servers)
    // in the http block by now.
    // SAFETY: a resolver nginx made from this configuration, or NULL.
    let unset = resolver.is_null()
        || resolver as usize == usize::MAX
        || unsafe { (*resolver).connections.nelts } == 0;
    if !unset {
        conf.resolver = Some(Resolver {
            resolver,
            timeout_ms: if timeout == nginx_sys::ngx_msec_t::MAX {
                30_000
            } else {
                timeout
            },
        });
        return true;
    }
    let at = conf
        .at
        .as_ref()
        .map_or_else(String::new, |at| format!(" in {at}"));
    if let Some((shown, why)) = &conf.unresolved {
        log_at!(
            nginx_sys::NGX_LOG_EMERG,
            cf.log,
            "invalid value \"{shown}\" in \"pow_shield_redis\" directive: {why}{at}"
        );
        return false;
    }
    let names = conf.names();
    if let Some(name) = names.first() {
        log_at!(
            nginx_sys::NGX_LOG_WARN,
            cf.log,
            "pow_shield: \"pow_shield_redis\" resolves \"{name}\" only now: without a \
             \"resolver\" in the http block, a new address of it (or of a node announced by \
             name) is not followed until a reload{at}"
        );
    }
    true
}

/// The TLS context of a `rediss://` URL: every file is checked here, so a
/// missing one fails `nginx -t` with the option that names it.
fn tls_context(
    d: &mut Directive,
    url: &str,
    options: &RedisOptions,
) -> Result<*mut nginx_sys::ngx_ssl_t, DirectiveError> {
    let tls = &options.tls;
    let options_args = d.args.get(1..).unwrap_or_default();
    // The option as written, for messages.
    let arg = |name: &str| words::named(options_args, name).to_owned();
    let mut readable = |name: &str, path: &str| -> Result<String, DirectiveError> {
        let full = full_path(d.cf, path)
            .ok_or_else(|| DirectiveError::invalid(&arg(name), "cannot resolve the path"))?;
        std::fs::File::open(&full).map_err(|e| {
            DirectiveError::invalid(&arg(name), format_args!("cannot read \"{full}\": {e}"))
        })?;
        Ok(full)
    };
    let ca = match (&tls.ca, tls.verify) {
        (_, false) => None,
        (Some(ca), true) => Some(readable("tls_ca", ca)?),
        (None, true) => {
            // Without tls_ca=, the system's CA bundle (OpenSSL's default file).
            let system = crate::redis::tls::default_ca_file().unwrap_or_default();
            if std::fs::File::open(&system).is_err() {
                return Err(DirectiveError::invalid(
                    url,
                    format_args!(
                        "TLS verification needs \"tls_ca=<file>\": no system CA bundle at \"{system}\" (or \"tls_verify=off\")"
                    ),
                ));
            }
            Some(system)
        }
    };
    let cert = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => Some((readable("tls_cert", cert)?, readable("tls_key", key)?)),
        _ => None,
    };
    let files = crate::redis::tls::Files {
        ca: ca.as_deref(),
        cert: cert.as_ref().map(|(c, k)| (c.as_str(), k.as_str())),
    };
    crate::redis::tls::context(d.cf, &files).map_err(|why| {
        let at = match words::tls_fault(&why, ca.is_some() && tls.ca.is_some()) {
            TlsFault::Cert => arg("tls_cert"),
            TlsFault::Ca => arg("tls_ca"),
            TlsFault::Url => url.to_owned(),
        };
        DirectiveError::invalid(&at, why)
    })
}

/// Resolves `host:port` or `unix:/path` with nginx's own URL parser.
fn resolve(cf: &mut ngx_conf_t, text: &str) -> Result<ngx_addr_t, String> {
    // SAFETY: a zeroed ngx_url_t is its documented initial state; the text
    // is copied into the configuration pool, where nginx also puts results.
    unsafe {
        let mut u: ngx_url_t = core::mem::zeroed();
        u.url = ngx_str_t::from_bytes(cf.pool, text.as_bytes()).ok_or("out of memory")?;
        u.default_port = 6379;
        if nginx_sys::ngx_parse_url(cf.pool, &mut u) != nginx_sys::NGX_OK as isize {
            let why = if u.err.is_null() {
                "cannot parse the address".to_owned()
            } else {
                core::ffi::CStr::from_ptr(u.err)
                    .to_string_lossy()
                    .into_owned()
            };
            return Err(why);
        }
        match u.addrs.as_ref() {
            Some(addr) if u.naddrs > 0 => Ok(*addr),
            _ => Err("host not found".to_owned()),
        }
    }
}

//! `pow_shield_redis`: the words are parsed and checked by
//! `pow_shield_core::config::redis`; here the addresses are resolved with
//! nginx's URL parser and the TLS context is made, so that `nginx -t`
//! fails on an unknown host or a missing file.

use core::ptr;

use nginx_sys::{ngx_addr_t, ngx_conf_t, ngx_str_t, ngx_url_t};
use pow_shield_core::config::redis::{self as words, TlsFault};
use pow_shield_core::redis::cluster::NodeAddr;
use pow_shield_core::redis::url::{RedisOptions, RedisTarget};

use super::setters::{full_path, setter, Directive, Refusal};
use super::MainConf;

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
    /// Every URL's node, resolved (with `cluster`: the seed nodes).
    pub seeds: Vec<(NodeAddr, ngx_addr_t)>,
}

setter!(set_redis, MainConf, |d, mcf| {
    if mcf.redis.is_some() {
        return Err(Refusal::Duplicate);
    }
    let url = d.value();
    let Some(parsed) = words::parse(&d.args)? else {
        mcf.redis = Some(None);
        return Ok(());
    };
    // Refusals show the URL with any password hidden.
    let shown = parsed.shown.clone();
    let mut seeds = Vec::with_capacity(parsed.targets.len());
    for node in parsed.nodes() {
        let addr = resolve(d.cf, &node.to_string()).map_err(|e| Refusal::invalid(&shown, e))?;
        seeds.push((node, addr));
    }
    let options_args = d.args.get(1..).unwrap_or_default();
    let (target, options, display) = parsed.into_target(url, options_args)?;
    let addr = resolve(d.cf, &display).map_err(|e| Refusal::invalid(&shown, e))?;
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
    }));
    Ok(())
});

/// The TLS context of a `rediss://` URL: every file is checked here, so a
/// missing one fails `nginx -t` with the option that names it.
fn tls_context(
    d: &mut Directive,
    url: &str,
    options: &RedisOptions,
) -> Result<*mut nginx_sys::ngx_ssl_t, Refusal> {
    let tls = &options.tls;
    let options_args = d.args.get(1..).unwrap_or_default();
    // The option as written, for messages.
    let arg = |name: &str| words::named(options_args, name).to_owned();
    let mut readable = |name: &str, path: &str| -> Result<String, Refusal> {
        let full = full_path(d.cf, path)
            .ok_or_else(|| Refusal::invalid(&arg(name), "cannot resolve the path"))?;
        std::fs::File::open(&full).map_err(|e| {
            Refusal::invalid(&arg(name), format_args!("cannot read \"{full}\": {e}"))
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
                return Err(Refusal::invalid(
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
        Refusal::invalid(&at, why)
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

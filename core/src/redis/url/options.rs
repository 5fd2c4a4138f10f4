//! `pow_shield_redis`'s options after its URLs (`cluster`, `slot=`,
//! `timeout=`, `prefix=`, `tls_*=` ...): their values, how each word is
//! applied, and the checks of the options against the URLs.

use core::fmt;

use zeroize::Zeroizing;

use super::{percent_decode, RedisAddr, RedisTarget, MAX_REDIS_PREFIX_LEN, MAX_REDIS_TIMEOUT_MS};
use crate::redis::cluster::ClientSlot;
use crate::syntax::{parse_time_ms, ValueError};

/// Connection options after the `pow_shield_redis` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisOptions {
    /// Deadline for a reply, in ms (default 50: Redis sits in front of
    /// every shielded request).
    pub timeout_ms: u64,
    /// Deadline for connecting, in ms (default 100).
    pub connect_timeout_ms: u64,
    /// Prepended to every key (default `pow:`).
    pub prefix: String,
    /// The `tls_*` options (only with `rediss://`).
    pub tls: TlsOptions,
    /// `cluster`: the URLs are seed nodes of a Redis Cluster.
    pub cluster: bool,
    /// `slot=`: which slot a client's keys take (a Redis Cluster's).
    pub slot: ClientSlot,
    /// `sentinel_password=`: the sentinels' own password (`sentinel://`).
    pub sentinel_password: Option<SentinelPassword>,
}

/// The sentinels' password: wiped on drop, never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelPassword(pub Zeroizing<String>);

impl fmt::Debug for SentinelPassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// How a `rediss://` connection is verified and which certificate it shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOptions {
    /// `tls_ca=`: the CA certificates (PEM) that verify Redis; without it,
    /// OpenSSL's default CA file (the system bundle).
    pub ca: Option<String>,
    /// `tls_verify=` (default on): the certificate chain and the name.
    pub verify: bool,
    /// `tls_name=`: the name checked and sent (SNI) instead of the URL's host.
    pub name: Option<String>,
    /// `tls_cert=` and `tls_key=`: a client certificate (mutual TLS).
    pub cert: Option<String>,
    pub key: Option<String>,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            ca: None,
            verify: true,
            name: None,
            cert: None,
            key: None,
        }
    }
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            timeout_ms: 50,
            connect_timeout_ms: 100,
            prefix: "pow:".to_owned(),
            tls: TlsOptions::default(),
            cluster: false,
            slot: ClientSlot::Own,
            sentinel_password: None,
        }
    }
}

/// Checks several URLs and `cluster` together: several URLs need
/// `cluster`; a cluster's nodes are TCP, database 0, all `redis://` or all
/// `rediss://`, with the same credentials.
pub fn check_cluster(targets: &[RedisTarget], opts: &RedisOptions) -> Result<(), ValueError> {
    let Some(first) = targets.first() else {
        return Err(ValueError::Empty);
    };
    if first.sentinel.is_some() && opts.cluster {
        return Err(ValueError::Syntax(
            "sentinel:// finds one master: \"cluster\" does not go with it",
        ));
    }
    if !opts.cluster {
        if targets.len() > 1 {
            return Err(ValueError::Syntax(
                "several URLs are the seed nodes of a Redis Cluster: add \"cluster\"",
            ));
        }
        return Ok(());
    }
    for t in targets {
        if matches!(t.addr, RedisAddr::Unix { .. }) {
            return Err(ValueError::Syntax("a Redis Cluster node needs host:port"));
        }
        if t.db != 0 {
            return Err(ValueError::Syntax("a Redis Cluster has database 0 only"));
        }
        if t.tls != first.tls {
            return Err(ValueError::Syntax(
                "the nodes of a cluster are all redis:// or all rediss://",
            ));
        }
        if t.username != first.username || t.password != first.password {
            return Err(ValueError::Syntax(
                "the nodes of a cluster share one user and password",
            ));
        }
    }
    Ok(())
}

/// An option that doesn't go with the rest: its name (to show the
/// argument) and why.
#[derive(Debug, PartialEq, Eq)]
pub struct Conflict(pub &'static str, pub ValueError);

/// Checks the options against the URL once all are applied: `tls_*` only
/// with `rediss://` (or `sentinels://`), a client certificate only with its
/// key, `sentinel_password=` only with `sentinel://`.
pub fn check_options(target: &RedisTarget, opts: &RedisOptions) -> Result<(), Conflict> {
    if opts.slot != ClientSlot::Own && !opts.cluster {
        return Err(Conflict(
            "slot",
            ValueError::Syntax("slot= places keys in a Redis Cluster's slots: add \"cluster\""),
        ));
    }
    if opts.sentinel_password.is_some() && target.sentinel.is_none() {
        return Err(Conflict(
            "sentinel_password",
            ValueError::Syntax("sentinel_password= needs a sentinel:// URL"),
        ));
    }
    let tls = &opts.tls;
    if !target.tls {
        let given = [
            ("tls_ca", tls.ca.is_some()),
            ("tls_verify", !tls.verify),
            ("tls_name", tls.name.is_some()),
            ("tls_cert", tls.cert.is_some()),
            ("tls_key", tls.key.is_some()),
        ];
        if let Some((name, _)) = given.iter().find(|(_, set)| *set) {
            return Err(Conflict(
                name,
                ValueError::Syntax("TLS options need a rediss:// or sentinels:// URL"),
            ));
        }
    }
    match (&tls.cert, &tls.key) {
        (Some(_), None) => Err(Conflict(
            "tls_cert",
            ValueError::Syntax("tls_cert= needs tls_key="),
        )),
        (None, Some(_)) => Err(Conflict(
            "tls_key",
            ValueError::Syntax("tls_key= needs tls_cert="),
        )),
        _ => Ok(()),
    }
}

/// The name a `rediss://` server's certificate must carry (and the SNI
/// sent): `tls_name=`, else the URL's host.
pub fn tls_name<'a>(target: &'a RedisTarget, opts: &'a RedisOptions) -> Option<&'a str> {
    if !target.tls {
        return None;
    }
    match (&opts.tls.name, &target.addr) {
        (Some(name), _) => Some(name),
        (None, RedisAddr::Tcp { host, .. }) => Some(host),
        (None, RedisAddr::Unix { .. }) => None,
    }
}

/// Applies one `timeout=<time>`, `connect_timeout=<time>`, `prefix=<string>`
/// or `tls_*=` argument (checked against the URL by [`check_options`]). Times are nginx times (`50ms`; a bare number
/// is seconds), above 0 and at most 60 s. The prefix is printable ASCII
/// without spaces or braces (braces would break the `{client}` hash tag),
/// at most 64 bytes; it may be empty.
pub fn apply_redis_option(opts: &mut RedisOptions, arg: &str) -> Result<(), ValueError> {
    if arg == "cluster" {
        opts.cluster = true;
        return Ok(());
    }
    let (name, value) = arg.split_once('=').ok_or(ValueError::Syntax(OPTIONS))?;
    match name {
        "timeout" => opts.timeout_ms = parse_redis_timeout(value)?,
        "connect_timeout" => opts.connect_timeout_ms = parse_redis_timeout(value)?,
        "slot" => {
            opts.slot = match value {
                "client" => ClientSlot::Own,
                "net" => ClientSlot::Net,
                _ => return Err(ValueError::Syntax("slot must be client or net")),
            }
        }
        "prefix" => {
            if value.len() > MAX_REDIS_PREFIX_LEN {
                return Err(ValueError::OutOfRange("a prefix of at most 64 bytes"));
            }
            if !value
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'{' && b != b'}')
            {
                return Err(ValueError::Syntax(
                    "prefix must be printable ASCII without spaces or braces",
                ));
            }
            opts.prefix = value.to_owned();
        }
        "sentinel_password" => {
            if value.is_empty() {
                return Err(ValueError::Empty);
            }
            let password = percent_decode(value)?;
            opts.sentinel_password = Some(SentinelPassword(password));
        }
        "tls_ca" => opts.tls.ca = Some(tls_file(value)?),
        "tls_cert" => opts.tls.cert = Some(tls_file(value)?),
        "tls_key" => opts.tls.key = Some(tls_file(value)?),
        "tls_verify" => {
            opts.tls.verify = match value {
                "on" => true,
                "off" => false,
                _ => return Err(ValueError::Syntax("tls_verify must be on or off")),
            }
        }
        "tls_name" => {
            let valid = !value.is_empty()
                && value.len() <= 253
                && value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b));
            if !valid {
                return Err(ValueError::Syntax(
                    "tls_name must be a host name or address",
                ));
            }
            opts.tls.name = Some(value.to_owned());
        }
        _ => return Err(ValueError::Syntax(OPTIONS)),
    }
    Ok(())
}

const OPTIONS: &str = "unknown option, expected cluster, slot=, timeout=, connect_timeout=, \
                       prefix=, sentinel_password=, tls_ca=, tls_verify=, tls_name=, tls_cert= or \
                       tls_key=";

/// A file name for a `tls_*` option (nginx resolves it, relative to the
/// configuration prefix, and reports a file it can't read).
fn tls_file(value: &str) -> Result<String, ValueError> {
    if value.is_empty() {
        return Err(ValueError::Empty);
    }
    if value.bytes().any(|b| b.is_ascii_control()) {
        return Err(ValueError::Syntax("control character in file name"));
    }
    Ok(value.to_owned())
}

fn parse_redis_timeout(value: &str) -> Result<u64, ValueError> {
    let ms = parse_time_ms(value)?;
    if ms == 0 || ms > MAX_REDIS_TIMEOUT_MS {
        return Err(ValueError::OutOfRange("a time above 0 and at most 60s"));
    }
    Ok(ms)
}

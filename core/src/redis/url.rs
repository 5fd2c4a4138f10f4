//! The `pow_shield_redis` URL and its options (docs/directives.md,
//! "pow_shield_redis"). Pure: the glue reports a refusal with the
//! directive, value, file and line.
#![forbid(unsafe_code)]

use core::fmt;

use percent_encoding::percent_decode_str;
use zeroize::Zeroizing;

use crate::redis::cluster::ClientSlot;
use crate::syntax::{parse_bounded, parse_time_ms, ValueError};

/// Longest Redis timeout accepted by [`apply_redis_option`].
pub const MAX_REDIS_TIMEOUT_MS: u64 = 60_000;
/// Longest key prefix accepted by [`apply_redis_option`].
pub const MAX_REDIS_PREFIX_LEN: usize = 64;

/// Where Redis listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisAddr {
    /// A host name or address (IPv6 without brackets) and port.
    Tcp {
        /// Host name, IPv4 or IPv6 address.
        host: String,
        /// TCP port, 1..=65535.
        port: u16,
    },
    /// A Unix-domain socket (its absolute path).
    Unix { path: String },
}

/// A parsed `pow_shield_redis` URL. Its `Debug` output hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisTarget {
    /// Where to connect.
    pub addr: RedisAddr,
    /// ACL user for `AUTH user password`; `None` for `AUTH password`.
    pub username: Option<String>,
    /// Password, wiped from memory on drop; `None`: no `AUTH`.
    pub password: Option<Zeroizing<String>>,
    /// Database for `SELECT` (0 needs none).
    pub db: u32,
    /// `rediss://`: TLS on the connection.
    pub tls: bool,
    /// `sentinel://`: the master is found by asking these sentinels;
    /// `addr` is then the first sentinel.
    pub sentinel: Option<Sentinels>,
}

/// The sentinels of a `sentinel://` URL and the master they watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sentinels {
    /// The master's name in the sentinels' configuration.
    pub master: String,
    /// `host:port` of each sentinel, in the order given.
    pub hosts: Vec<(String, u16)>,
}

impl fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTarget")
            .field("addr", &self.addr)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("db", &self.db)
            .field("tls", &self.tls)
            .field("sentinel", &self.sentinel)
            .finish()
    }
}

const DEFAULT_REDIS_PORT: u16 = 6379;

/// Why a URL with `?` after the host is refused.
pub const QUERY_REFUSED: &str =
    "query strings are not supported: give options as words after the URL (timeout=100ms ...)";

/// `redis://[[user]:password@]host[:port][/db]`, the same with `rediss://`
/// (TLS), or `unix:/absolute/path`. Port defaults to 6379 and db to 0 (at
/// most 65535); IPv6 goes in brackets; user and password are
/// percent-decoded. Query strings are refused.
pub fn parse_redis_url(s: &str) -> Result<RedisTarget, ValueError> {
    if s.is_empty() {
        return Err(ValueError::Empty);
    }
    if let Some(path) = s.strip_prefix("unix:") {
        if !path.starts_with('/') || path.len() < 2 {
            return Err(ValueError::Syntax("unix: needs an absolute socket path"));
        }
        if path.bytes().any(|b| b.is_ascii_control()) {
            return Err(ValueError::Syntax("control character in socket path"));
        }
        return Ok(RedisTarget {
            addr: RedisAddr::Unix {
                path: path.to_owned(),
            },
            username: None,
            password: None,
            db: 0,
            tls: false,
            sentinel: None,
        });
    }
    if s.starts_with("sentinel://") || s.starts_with("sentinels://") {
        return parse_sentinel_url(s);
    }
    let (tls, rest) = match (s.strip_prefix("redis://"), s.strip_prefix("rediss://")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => {
            return Err(ValueError::Syntax(
                "expected redis://host[:port][/db], rediss://... or unix:/path",
            ))
        }
    };
    let (userinfo, hostpath) = split_userinfo(rest)?;
    let (hostport, db) = match hostpath.split_once('/') {
        Some((hostport, db)) => (hostport, parse_db(db)?),
        None => (hostpath, 0),
    };
    let (username, password) = userinfo
        .map(parse_userinfo)
        .transpose()?
        .unwrap_or_default();
    let (host, port) = parse_host_port(hostport)?;
    Ok(RedisTarget {
        addr: RedisAddr::Tcp { host, port },
        username,
        password,
        db,
        tls,
        sentinel: None,
    })
}

/// The sentinels' default port.
const DEFAULT_SENTINEL_PORT: u16 = 26379;
/// Most sentinels in one URL.
pub const MAX_SENTINELS: usize = 16;

/// `sentinel://[[user]:password@]host[:port][,host[:port]...]/<master>[/db]`,
/// `sentinels://` with TLS (to the sentinels and to the master). The
/// credentials and the database are the master's (`sentinel_password=` is
/// the sentinels'); the port defaults to 26379. A master name is what
/// Sentinel accepts in its configuration: printable ASCII without spaces
/// or `/`, at most 64 bytes.
fn parse_sentinel_url(s: &str) -> Result<RedisTarget, ValueError> {
    let (tls, rest) = match s.strip_prefix("sentinels://") {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix("sentinel://").unwrap_or(s)),
    };
    let (userinfo, hostpath) = split_userinfo(rest)?;
    const SHAPE: &str = "expected sentinel://host[:port][,host[:port]...]/<master-name>[/db]";
    let (hosts, path) = hostpath.split_once('/').ok_or(ValueError::Syntax(SHAPE))?;
    let (master, db) = match path.split_once('/') {
        Some((master, db)) => (master, parse_db(db)?),
        None => (path, 0),
    };
    let master_ok = !master.is_empty()
        && master.len() <= 64
        && master.bytes().all(|b| b.is_ascii_graphic() && b != b'/');
    if !master_ok {
        return Err(ValueError::Syntax(
            "the master name must be printable ASCII without spaces, at most 64 bytes",
        ));
    }
    let hosts: Vec<&str> = hosts.split(',').collect();
    if hosts.len() > MAX_SENTINELS {
        return Err(ValueError::OutOfRange("at most 16 sentinels"));
    }
    let hosts = hosts
        .into_iter()
        .map(|h| {
            if h.is_empty() {
                return Err(ValueError::Syntax("missing host"));
            }
            // parse_host_port defaults to Redis's port: a sentinel's is 26379.
            let explicit = h
                .rsplit_once(':')
                .is_some_and(|(before, _)| !h.starts_with('[') || before.ends_with(']'));
            let (host, port) = parse_host_port(h)?;
            Ok((
                host,
                if explicit {
                    port
                } else {
                    DEFAULT_SENTINEL_PORT
                },
            ))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (username, password) = userinfo
        .map(parse_userinfo)
        .transpose()?
        .unwrap_or_default();
    let (host, port) = hosts.first().cloned().ok_or(ValueError::Syntax(SHAPE))?;
    Ok(RedisTarget {
        addr: RedisAddr::Tcp { host, port },
        username,
        password,
        db,
        tls,
        sentinel: Some(Sentinels {
            master: master.to_owned(),
            hosts,
        }),
    })
}

/// `[userinfo@]hostpath`, split at the last '@' (a password may hold '/'
/// or '@'); a query string after the host is refused: options are words
/// of their own (`timeout=100ms`).
fn split_userinfo(rest: &str) -> Result<(Option<&str>, &str), ValueError> {
    let (userinfo, hostpath) = match rest.rsplit_once('@') {
        Some((userinfo, hostpath)) => (Some(userinfo), hostpath),
        None => (None, rest),
    };
    if hostpath.contains('?') {
        return Err(ValueError::Syntax(QUERY_REFUSED));
    }
    Ok((userinfo, hostpath))
}

/// The optional `/db` path: empty or 0..=65535.
fn parse_db(db: &str) -> Result<u32, ValueError> {
    if db.is_empty() {
        return Ok(0);
    }
    parse_bounded(
        db,
        0..=65_535,
        "database must be a number",
        "a database number between 0 and 65535",
    )
}

type Credentials = (Option<String>, Option<Zeroizing<String>>);

/// `[user]:password`, percent-decoded; the password must not be empty.
fn parse_userinfo(userinfo: &str) -> Result<Credentials, ValueError> {
    let (user, password) = userinfo.split_once(':').ok_or(ValueError::Syntax(
        "credentials must be user:password@ or :password@",
    ))?;
    let password = percent_decode(password)?;
    if password.is_empty() {
        return Err(ValueError::Syntax("empty password"));
    }
    let user = match percent_decode(user)? {
        user if user.is_empty() => None,
        user => Some(user.to_string()),
    };
    Ok((user, Some(password)))
}

/// `host[:port]` or `[v6][:port]`.
fn parse_host_port(hostport: &str) -> Result<(String, u16), ValueError> {
    let (host, port) = if let Some(bracketed) = hostport.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or(ValueError::Syntax("missing ] after IPv6 address"))?;
        let valid = host.contains(':')
            && host
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        if !valid {
            return Err(ValueError::Syntax("invalid IPv6 address"));
        }
        let port = match after {
            "" => None,
            after => Some(
                after
                    .strip_prefix(':')
                    .ok_or(ValueError::Syntax("unexpected text after IPv6 address"))?,
            ),
        };
        (host, port)
    } else {
        match hostport.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return Err(ValueError::Syntax("missing host"));
    }
    // DNS names end at 253 characters (as the cluster's node addresses do).
    if host.len() > 253 {
        return Err(ValueError::Syntax("host name longer than 253 characters"));
    }
    let host_chars_ok = hostport.starts_with('[')
        || host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    if !host_chars_ok {
        return Err(ValueError::Syntax("invalid host name"));
    }
    let port = match port {
        None => DEFAULT_REDIS_PORT,
        Some(port) => parse_bounded(
            port,
            1..=u16::MAX,
            "port must be a number",
            "a port between 1 and 65535",
        )?,
    };
    Ok((host.to_owned(), port))
}

/// Decodes `%XX` escapes into a wiped-on-drop string. A `%` not followed
/// by two hex digits is refused (`percent_decode_str` would keep it).
fn percent_decode(s: &str) -> Result<Zeroizing<String>, ValueError> {
    const BAD: ValueError = ValueError::Syntax("invalid percent-encoding in credentials");
    let escape = |e: &str| {
        e.as_bytes()
            .get(..2)
            .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    };
    if !s.split('%').skip(1).all(escape) {
        return Err(BAD);
    }
    // Room for all of it up front: no reallocation leaves a copy behind.
    let mut bytes = Zeroizing::new(Vec::with_capacity(s.len()));
    bytes.extend(percent_decode_str(s));
    let text = core::str::from_utf8(&bytes).map_err(|_| BAD)?;
    Ok(Zeroizing::new(text.to_owned()))
}

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

/// Most seed URLs in one `pow_shield_redis`.
pub const MAX_SEEDS: usize = 16;

/// `<url>[,<url>...]`: each as [`parse_redis_url`].
pub fn parse_redis_urls(s: &str) -> Result<Vec<RedisTarget>, ValueError> {
    if s.starts_with("sentinel://") || s.starts_with("sentinels://") {
        // One URL: its commas separate sentinels.
        return Ok(vec![parse_sentinel_url(s)?]);
    }
    let urls: Vec<&str> = s.split(',').collect();
    if urls.len() > MAX_SEEDS {
        return Err(ValueError::OutOfRange("at most 16 URLs"));
    }
    urls.into_iter().map(parse_redis_url).collect()
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

#[cfg(test)]
mod tests;

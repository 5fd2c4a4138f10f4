//! The `pow_shield_redis` URL and its options (docs/directives.md,
//! "pow_shield_redis"). Pure: the glue reports a refusal with the
//! directive, value, file and line.
#![forbid(unsafe_code)]

use core::fmt;

use percent_encoding::percent_decode_str;
use zeroize::Zeroizing;

use crate::syntax::{parse_bounded, ValueError};

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

mod options;
pub use options::{
    apply_redis_option, check_cluster, check_options, tls_name, Conflict, RedisOptions,
    SentinelPassword, TlsOptions,
};

#[cfg(test)]
mod tests;

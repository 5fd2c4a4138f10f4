//! Parsers for directive values (docs/directives.md). Pure: the glue passes the value
//! text and reports `invalid value "X" in "directive": <ValueError>` with
//! file and line.
#![forbid(unsafe_code)]

use core::fmt;
use core::ops::RangeInclusive;

use zeroize::Zeroizing;

use crate::limiter::strikes::{BanRule, StrikeRule};
use crate::limiter::RateLimit;
use crate::pow::{MAX_DIFFICULTY, MIN_DIFFICULTY};

/// Why a directive value was refused: a short reason, never the value
/// itself (the glue prints that, and it may be a password).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// The value is empty.
    #[error("empty value")]
    Empty,
    /// The value does not have the expected form; the text says which.
    #[error("{0}")]
    Syntax(&'static str),
    /// The value does not fit the type or the bounds; the text gives them.
    #[error("must be {0}")]
    OutOfRange(&'static str),
}

/// Fewest requests per window accepted by [`parse_limit`].
pub const MIN_LIMIT_REQUESTS: u32 = 1;
/// Most requests per window accepted by [`parse_limit`].
pub const MAX_LIMIT_REQUESTS: u32 = 1_000_000;
/// Shortest window accepted by [`parse_limit`]: one second, the unit of the
/// rate-limit headers.
pub const MIN_LIMIT_WINDOW_MS: u64 = 1_000;
/// Longest window accepted by [`parse_limit`]: one day.
pub const MAX_LIMIT_WINDOW_MS: u64 = 86_400_000;
/// Longest Redis timeout accepted by [`apply_redis_option`].
pub const MAX_REDIS_TIMEOUT_MS: u64 = 60_000;
/// Longest key prefix accepted by [`apply_redis_option`].
pub const MAX_REDIS_PREFIX_LEN: usize = 64;

const TIME_SYNTAX: &str = "not a time (examples: 500ms, 30s, 5m, 1h30m)";

/// An nginx time (`ngx_parse_time`) in milliseconds: components with the
/// units `y` (365 d), `M` (30 d), `w`, `d`, `h`, `m`, `s`, `ms`, largest
/// first, each at most once, optionally separated by spaces (`1h30m`,
/// `1h 30m`); a bare final number is seconds (`90` = 90 s, `1m30` = 90 s).
/// `0` is accepted; callers that need a positive time check for it.
pub fn parse_time_ms(s: &str) -> Result<u64, ValueError> {
    // Index of "s" in TIME_UNITS: a bare number is seconds.
    const SECONDS: usize = 6;
    if s.is_empty() {
        return Err(ValueError::Empty);
    }
    let mut rest = s;
    let mut total: u64 = 0;
    // Index into TIME_UNITS of the smallest unit the next component may use.
    let mut next_unit = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (number, tail) = rest.split_at(digits);
        if number.is_empty() {
            return Err(ValueError::Syntax(TIME_SYNTAX));
        }
        let value = parse_decimal(number).ok_or(ValueError::OutOfRange("a shorter time"))?;
        // Longest suffix wins, so "ms" is not read as "m" then "s".
        let unit = TIME_UNITS
            .iter()
            .enumerate()
            .filter(|(_, (suffix, _))| tail.starts_with(suffix))
            .max_by_key(|(_, (suffix, _))| suffix.len());
        let (index, suffix, scale) = match unit {
            Some((index, (suffix, scale))) => (index, *suffix, *scale),
            None if tail.trim_start_matches(' ').is_empty() => (SECONDS, "", 1_000),
            None => return Err(ValueError::Syntax(TIME_SYNTAX)),
        };
        if index < next_unit {
            return Err(ValueError::Syntax(
                "time units must go from largest to smallest, each once",
            ));
        }
        next_unit = index + 1;
        total = value
            .checked_mul(scale)
            .and_then(|ms| total.checked_add(ms))
            .ok_or(ValueError::OutOfRange("a shorter time"))?;
        rest = tail
            .get(suffix.len()..)
            .unwrap_or_default()
            .trim_start_matches(' ');
    }
    Ok(total)
}

/// nginx time units and their length in ms, largest first.
const TIME_UNITS: [(&str, u64); 8] = [
    ("y", 365 * DAY_MS),
    ("M", 30 * DAY_MS),
    ("w", 7 * DAY_MS),
    ("d", DAY_MS),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

const DAY_MS: u64 = 86_400_000;

/// An nginx size (`ngx_parse_size`) in bytes: a number with an optional
/// `k`/`K`, `m`/`M` or `g`/`G` suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<usize, ValueError> {
    let (number, scale) = match s.as_bytes().last() {
        None => return Err(ValueError::Empty),
        Some(b'k' | b'K') => (s.get(..s.len() - 1), 1u64 << 10),
        Some(b'm' | b'M') => (s.get(..s.len() - 1), 1 << 20),
        Some(b'g' | b'G') => (s.get(..s.len() - 1), 1 << 30),
        Some(_) => (Some(s), 1),
    };
    let number = number
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .ok_or(ValueError::Syntax("not a size (examples: 512k, 10m, 1g)"))?;
    parse_decimal(number)
        .and_then(|n| n.checked_mul(scale))
        .and_then(|bytes| usize::try_from(bytes).ok())
        .ok_or(ValueError::OutOfRange("a smaller size"))
}

/// `pow_shield_limit <requests> <window>`: requests 1..=1,000,000, window
/// a whole number of seconds from 1 s to 1 d (the rate-limit headers count
/// in seconds).
pub fn parse_limit(requests: &str, window: &str) -> Result<RateLimit, ValueError> {
    if requests.is_empty() {
        return Err(ValueError::Empty);
    }
    let requests = parse_bounded(
        requests,
        MIN_LIMIT_REQUESTS..=MAX_LIMIT_REQUESTS,
        "requests must be a whole number",
        "between 1 and 1000000 requests",
    )?;
    let window_ms = parse_time_ms(window)?;
    if !(MIN_LIMIT_WINDOW_MS..=MAX_LIMIT_WINDOW_MS).contains(&window_ms) {
        return Err(ValueError::OutOfRange("a window between 1s and 1d"));
    }
    if window_ms % 1_000 != 0 {
        return Err(ValueError::OutOfRange("a window of whole seconds"));
    }
    Ok(RateLimit {
        requests,
        window_ms,
    })
}

/// A difficulty (leading hex zeros), 1..=12.
pub fn parse_difficulty(s: &str) -> Result<u8, ValueError> {
    if s.is_empty() {
        return Err(ValueError::Empty);
    }
    parse_bounded(
        s,
        MIN_DIFFICULTY..=MAX_DIFFICULTY,
        "not a whole number",
        "between 1 and 12",
    )
}

/// `max=<m>` of `pow_shield_difficulty <n> max=<m>`: `n..=12`.
pub fn parse_difficulty_max(s: &str, base: u8) -> Result<u8, ValueError> {
    let Some(max) = s.strip_prefix("max=") else {
        return Err(ValueError::Syntax("expected \"max=<difficulty>\""));
    };
    let max = parse_difficulty(max)?;
    if max < base {
        return Err(ValueError::OutOfRange("at least the base difficulty"));
    }
    Ok(max)
}

/// Most strikes `pow_shield_strikes` accepts.
pub const MAX_STRIKES: u32 = 1_000_000;

/// `pow_shield_strikes <n> <time>`: `n` in 1..=1000000, `time` 1s..=1d.
pub fn parse_strikes(count: &str, time: &str) -> Result<StrikeRule, ValueError> {
    let threshold = parse_bounded(
        count,
        1..=MAX_STRIKES,
        "strikes must be a whole number",
        "between 1 and 1000000 strikes",
    )?;
    Ok(StrikeRule {
        threshold,
        ttl_ms: parse_red_time(time)?,
    })
}

/// `pow_shield_ban <time> after=<k>`: `time` 1s..=1d, `k` in 1..=1000.
pub fn parse_ban(time: &str, after: &str) -> Result<BanRule, ValueError> {
    let ttl_ms = parse_red_time(time)?;
    let Some(after) = after.strip_prefix("after=") else {
        return Err(ValueError::Syntax("expected \"after=<count>\""));
    };
    let after = parse_bounded(
        after,
        1..=1_000,
        "after= must be a whole number",
        "between 1 and 1000 openings",
    )?;
    Ok(BanRule { after, ttl_ms })
}

/// How long strikes or a ban last: 1s..=1d (whole milliseconds).
fn parse_red_time(s: &str) -> Result<u64, ValueError> {
    let ms = parse_time_ms(s)?;
    if !(1_000..=86_400_000).contains(&ms) {
        return Err(ValueError::OutOfRange("a time between 1s and 1d"));
    }
    Ok(ms)
}

/// `pow_shield_block_status`: an error status 400..=599 (444 closes the
/// connection, as in nginx's `return 444`).
pub fn parse_block_status(s: &str) -> Result<u16, ValueError> {
    parse_bounded(s, 400..=599, "not a status code", "between 400 and 599")
}

/// `pow_shield_headers`: which rate-limit headers to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadersMode {
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset`.
    X,
    /// The IETF draft's `RateLimit` and `RateLimit-Policy`.
    Ietf,
    /// Both sets (the default).
    Both,
    /// None.
    Off,
}

/// `x`, `ietf`, `both` or `off`, case-insensitive like nginx's enum slots.
pub fn parse_headers_mode(s: &str) -> Result<HeadersMode, ValueError> {
    match_keyword(
        s,
        &[
            ("x", HeadersMode::X),
            ("ietf", HeadersMode::Ietf),
            ("both", HeadersMode::Both),
            ("off", HeadersMode::Off),
        ],
        "must be x, ietf, both or off",
    )
}

/// `pow_shield_fail`: what to do while Redis is unavailable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailPolicy {
    /// Decide with the shared-memory leaky bucket (the default).
    Local,
    /// Let requests through.
    Open,
    /// Answer 503 with `Retry-After`, except trusted requests.
    Closed,
}

/// `local`, `open` or `closed`, case-insensitive.
pub fn parse_fail_policy(s: &str) -> Result<FailPolicy, ValueError> {
    match_keyword(
        s,
        &[
            ("local", FailPolicy::Local),
            ("open", FailPolicy::Open),
            ("closed", FailPolicy::Closed),
        ],
        "must be local, open or closed",
    )
}

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
    /// A Unix-domain socket.
    Unix {
        /// Absolute socket path.
        path: String,
    },
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
}

impl fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTarget")
            .field("addr", &self.addr)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("db", &self.db)
            .finish()
    }
}

const DEFAULT_REDIS_PORT: u16 = 6379;

/// `redis://[[user]:password@]host[:port][/db]` or `unix:/absolute/path`.
/// Port defaults to 6379 and db to 0 (at most 65535); IPv6 goes in
/// brackets; user and password are percent-decoded. `rediss://` (TLS) and
/// query strings are refused.
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
        });
    }
    if s.starts_with("rediss://") {
        return Err(ValueError::Syntax("TLS (rediss://) is not supported"));
    }
    let rest = s.strip_prefix("redis://").ok_or(ValueError::Syntax(
        "expected redis://host[:port][/db] or unix:/path",
    ))?;
    // Split at the last '@' first: a password may hold '/' or '@'.
    let (userinfo, hostpath) = match rest.rsplit_once('@') {
        Some((userinfo, hostpath)) => (Some(userinfo), hostpath),
        None => (None, rest),
    };
    let (hostport, db) = match hostpath.split_once('/') {
        Some((hostport, db)) => (hostport, parse_db(db)?),
        None => (hostpath, 0),
    };
    let (username, password) = match userinfo {
        Some(userinfo) => parse_userinfo(userinfo)?,
        None => (None, None),
    };
    let (host, port) = parse_host_port(hostport)?;
    Ok(RedisTarget {
        addr: RedisAddr::Tcp { host, port },
        username,
        password,
        db,
    })
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

/// Decodes `%XX` escapes into a wiped-on-drop string.
fn percent_decode(s: &str) -> Result<Zeroizing<String>, ValueError> {
    const BAD: ValueError = ValueError::Syntax("invalid percent-encoding in credentials");
    let mut bytes = Zeroizing::new(Vec::with_capacity(s.len()));
    let mut iter = s.bytes();
    while let Some(b) = iter.next() {
        if b == b'%' {
            let hi = iter.next().and_then(hex_value).ok_or(BAD)?;
            let lo = iter.next().and_then(hex_value).ok_or(BAD)?;
            bytes.push(hi << 4 | lo);
        } else {
            bytes.push(b);
        }
    }
    let text = core::str::from_utf8(&bytes).map_err(|_| BAD)?;
    Ok(Zeroizing::new(text.to_owned()))
}

fn hex_value(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
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
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            timeout_ms: 50,
            connect_timeout_ms: 100,
            prefix: "pow:".to_owned(),
        }
    }
}

/// Applies one `timeout=<time>`, `connect_timeout=<time>` or
/// `prefix=<string>` argument. Times are nginx times (`50ms`; a bare number
/// is seconds), above 0 and at most 60 s. The prefix is printable ASCII
/// without spaces or braces (braces would break the `{client}` hash tag),
/// at most 64 bytes; it may be empty.
pub fn apply_redis_option(opts: &mut RedisOptions, arg: &str) -> Result<(), ValueError> {
    let (name, value) = arg.split_once('=').ok_or(ValueError::Syntax(
        "expected timeout=, connect_timeout= or prefix=",
    ))?;
    match name {
        "timeout" => opts.timeout_ms = parse_redis_timeout(value)?,
        "connect_timeout" => opts.connect_timeout_ms = parse_redis_timeout(value)?,
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
        _ => {
            return Err(ValueError::Syntax(
                "unknown option, expected timeout=, connect_timeout= or prefix=",
            ))
        }
    }
    Ok(())
}

fn parse_redis_timeout(value: &str) -> Result<u64, ValueError> {
    let ms = parse_time_ms(value)?;
    if ms == 0 || ms > MAX_REDIS_TIMEOUT_MS {
        return Err(ValueError::OutOfRange("a time above 0 and at most 60s"));
    }
    Ok(ms)
}

/// Plain ASCII digits (no sign, no spaces) within `bounds`: `Syntax` if
/// not digits, `OutOfRange` if outside the bounds or the type.
fn parse_bounded<T>(
    s: &str,
    bounds: RangeInclusive<T>,
    syntax: &'static str,
    range: &'static str,
) -> Result<T, ValueError>
where
    T: TryFrom<u64> + PartialOrd,
{
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ValueError::Syntax(syntax));
    }
    parse_decimal(s)
        .and_then(|n| T::try_from(n).ok())
        .filter(|n| bounds.contains(n))
        .ok_or(ValueError::OutOfRange(range))
}

/// Plain ASCII digits as a `u64`; `None` if empty, another character
/// (no sign, no spaces) or overflow.
fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.bytes().try_fold(0u64, |acc, b| {
        let digit = char::from(b).to_digit(10)?;
        acc.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// The value paired with `s` (case-insensitive) in `table`.
fn match_keyword<T: Copy>(
    s: &str,
    table: &[(&str, T)],
    expected: &'static str,
) -> Result<T, ValueError> {
    if s.is_empty() {
        return Err(ValueError::Empty);
    }
    table
        .iter()
        .find(|(keyword, _)| keyword.eq_ignore_ascii_case(s))
        .map(|(_, value)| *value)
        .ok_or(ValueError::Syntax(expected))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_every_nginx_unit() {
        let cases = [
            ("500ms", 500),
            ("30s", 30_000),
            ("1m", 60_000),
            ("1h", 3_600_000),
            ("1d", 86_400_000),
            ("1w", 604_800_000),
            ("1M", 2_592_000_000),
            ("1y", 31_536_000_000),
            ("0", 0),
            ("0s", 0),
        ];
        for (text, ms) in cases {
            assert_eq!(parse_time_ms(text), Ok(ms), "{text}");
        }
    }

    #[test]
    fn bare_number_is_seconds() {
        assert_eq!(parse_time_ms("90"), Ok(90_000));
        assert_eq!(parse_time_ms("1m30"), Ok(90_000));
    }

    #[test]
    fn combined_times_add_up() {
        assert_eq!(parse_time_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_time_ms("1h 30m"), Ok(5_400_000));
        assert_eq!(parse_time_ms("1s500ms"), Ok(1_500));
        assert_eq!(parse_time_ms("1d2h3m4s5ms"), Ok(93_784_005));
        assert_eq!(parse_time_ms("30s "), Ok(30_000));
    }

    #[test]
    fn bad_times_are_refused() {
        assert_eq!(parse_time_ms(""), Err(ValueError::Empty));
        for text in [
            "s", "ms", "1x", "1.5s", "-1s", "+1s", " 1s", "1 s", "1S", "1H", "1mm", "30m1h",
            "1s1s", "1s5", "5ms1s", "1m s", "abc", "1e3",
        ] {
            assert!(
                matches!(parse_time_ms(text), Err(ValueError::Syntax(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn time_overflow_is_refused() {
        let err = Err(ValueError::OutOfRange("a shorter time"));
        assert_eq!(parse_time_ms("99999999999999999999ms"), err);
        assert_eq!(parse_time_ms("18446744073709551615s"), err);
        assert_eq!(parse_time_ms("584942418y"), err);
    }

    #[test]
    fn sizes_with_and_without_suffix() {
        let cases = [
            ("0", 0),
            ("4096", 4096),
            ("512k", 512 << 10),
            ("512K", 512 << 10),
            ("10m", 10 << 20),
            ("10M", 10 << 20),
            ("1g", 1 << 30),
            ("1G", 1 << 30),
        ];
        for (text, bytes) in cases {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn bad_sizes_are_refused() {
        assert_eq!(parse_size(""), Err(ValueError::Empty));
        for text in ["m", "10 m", "10mb", "1.5m", "-1", "10t", "ten", "é"] {
            assert!(
                matches!(parse_size(text), Err(ValueError::Syntax(_))),
                "{text}"
            );
        }
        assert_eq!(
            parse_size("99999999999999999g"),
            Err(ValueError::OutOfRange("a smaller size"))
        );
    }

    #[test]
    fn limit_of_60_per_minute() {
        assert_eq!(
            parse_limit("60", "1m"),
            Ok(RateLimit {
                requests: 60,
                window_ms: 60_000
            })
        );
    }

    #[test]
    fn limit_bounds_are_1_to_1000000_requests_and_1s_to_1d() {
        assert!(parse_limit("1", "1s").is_ok());
        assert!(parse_limit("1000000", "1d").is_ok());
        assert!(parse_limit("1", "1h30m").is_ok());
        for (requests, window) in [
            ("0", "1m"),
            ("1000001", "1m"),
            ("99999999999", "1m"),
            ("10", "999ms"),
            ("10", "0"),
            ("10", "1d1s"),
            ("10", "1500ms"),
        ] {
            assert!(
                matches!(
                    parse_limit(requests, window),
                    Err(ValueError::OutOfRange(_))
                ),
                "{requests} {window}"
            );
        }
    }

    #[test]
    fn limit_with_bad_syntax_is_refused() {
        assert_eq!(parse_limit("", "1m"), Err(ValueError::Empty));
        assert_eq!(parse_limit("10", ""), Err(ValueError::Empty));
        for (requests, window) in [("ten", "1m"), ("-1", "1m"), ("10r", "1m"), ("10", "1x")] {
            assert!(
                matches!(parse_limit(requests, window), Err(ValueError::Syntax(_))),
                "{requests} {window}"
            );
        }
    }

    #[test]
    fn difficulty_max_is_between_the_base_and_12() {
        assert_eq!(parse_difficulty_max("max=8", 4), Ok(8));
        assert_eq!(parse_difficulty_max("max=4", 4), Ok(4));
        assert!(matches!(
            parse_difficulty_max("max=3", 4),
            Err(ValueError::OutOfRange(_))
        ));
        assert!(parse_difficulty_max("max=13", 4).is_err());
        assert!(matches!(
            parse_difficulty_max("8", 4),
            Err(ValueError::Syntax(_))
        ));
    }

    #[test]
    fn strikes_take_a_count_and_a_time() {
        assert_eq!(
            parse_strikes("5", "60s"),
            Ok(StrikeRule {
                threshold: 5,
                ttl_ms: 60_000
            })
        );
        for (n, t) in [
            ("0", "60s"),
            ("x", "60s"),
            ("5", "0"),
            ("5", "2d"),
            ("5", "s"),
        ] {
            assert!(parse_strikes(n, t).is_err(), "{n} {t}");
        }
    }

    #[test]
    fn ban_takes_a_time_and_after() {
        assert_eq!(
            parse_ban("1h", "after=3"),
            Ok(BanRule {
                after: 3,
                ttl_ms: 3_600_000
            })
        );
        for (t, a) in [
            ("1h", "3"),
            ("1h", "after=0"),
            ("0", "after=3"),
            ("1h", "after="),
        ] {
            assert!(parse_ban(t, a).is_err(), "{t} {a}");
        }
    }

    #[test]
    fn block_status_is_an_error_status() {
        assert_eq!(parse_block_status("403"), Ok(403));
        assert_eq!(parse_block_status("444"), Ok(444));
        for text in ["200", "399", "600", "abc", ""] {
            assert!(parse_block_status(text).is_err(), "{text}");
        }
    }

    #[test]
    fn difficulty_is_1_to_12() {
        assert_eq!(parse_difficulty("1"), Ok(1));
        assert_eq!(parse_difficulty("4"), Ok(4));
        assert_eq!(parse_difficulty("12"), Ok(12));
        for text in ["0", "13", "256", "99999999999999999999999"] {
            assert_eq!(
                parse_difficulty(text),
                Err(ValueError::OutOfRange("between 1 and 12")),
                "{text}"
            );
        }
        assert_eq!(
            parse_difficulty("13"),
            Err(ValueError::OutOfRange("between 1 and 12"))
        );
        assert_eq!(parse_difficulty(""), Err(ValueError::Empty));
        for text in ["+4", " 4", "4.0", "four"] {
            assert!(
                matches!(parse_difficulty(text), Err(ValueError::Syntax(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn headers_modes_case_insensitive() {
        assert_eq!(parse_headers_mode("x"), Ok(HeadersMode::X));
        assert_eq!(parse_headers_mode("ietf"), Ok(HeadersMode::Ietf));
        assert_eq!(parse_headers_mode("BOTH"), Ok(HeadersMode::Both));
        assert_eq!(parse_headers_mode("off"), Ok(HeadersMode::Off));
        assert_eq!(parse_headers_mode(""), Err(ValueError::Empty));
        assert!(parse_headers_mode("on").is_err());
        assert!(parse_headers_mode("x-ratelimit").is_err());
    }

    #[test]
    fn fail_policies_case_insensitive() {
        assert_eq!(parse_fail_policy("local"), Ok(FailPolicy::Local));
        assert_eq!(parse_fail_policy("open"), Ok(FailPolicy::Open));
        assert_eq!(parse_fail_policy("Closed"), Ok(FailPolicy::Closed));
        assert_eq!(parse_fail_policy(""), Err(ValueError::Empty));
        assert!(parse_fail_policy("fail").is_err());
    }

    fn tcp(host: &str, port: u16) -> RedisAddr {
        RedisAddr::Tcp {
            host: host.to_owned(),
            port,
        }
    }

    #[test]
    fn redis_url_defaults_to_port_6379_and_db_0() {
        let t = parse_redis_url("redis://127.0.0.1").unwrap();
        assert_eq!(t.addr, tcp("127.0.0.1", 6379));
        assert_eq!((t.username, t.password, t.db), (None, None, 0));
    }

    #[test]
    fn redis_url_with_every_part() {
        let t = parse_redis_url("redis://app:s3cret@redis.internal:6380/2").unwrap();
        assert_eq!(t.addr, tcp("redis.internal", 6380));
        assert_eq!(t.username.as_deref(), Some("app"));
        assert_eq!(t.password.as_deref().map(String::as_str), Some("s3cret"));
        assert_eq!(t.db, 2);
    }

    #[test]
    fn redis_url_password_only_has_no_username() {
        let t = parse_redis_url("redis://:pw@h/").unwrap();
        assert_eq!(t.username, None);
        assert_eq!(t.password.as_deref().map(String::as_str), Some("pw"));
        assert_eq!(t.db, 0);
    }

    #[test]
    fn redis_url_credentials_are_percent_decoded() {
        let t = parse_redis_url("redis://us%40er:p%3Aw%2F%25@h").unwrap();
        assert_eq!(t.username.as_deref(), Some("us@er"));
        assert_eq!(t.password.as_deref().map(String::as_str), Some("p:w/%"));
    }

    #[test]
    fn redis_url_password_may_hold_raw_at_and_slash() {
        let t = parse_redis_url("redis://:a@b/c@h:1/3").unwrap();
        assert_eq!(t.password.as_deref().map(String::as_str), Some("a@b/c"));
        assert_eq!(t.addr, tcp("h", 1));
        assert_eq!(t.db, 3);
    }

    #[test]
    fn redis_url_ipv6_in_brackets() {
        assert_eq!(
            parse_redis_url("redis://[::1]").unwrap().addr,
            tcp("::1", 6379)
        );
        let t = parse_redis_url("redis://[2001:db8::7]:7000/65535").unwrap();
        assert_eq!(t.addr, tcp("2001:db8::7", 7000));
        assert_eq!(t.db, 65535);
    }

    #[test]
    fn redis_unix_socket_needs_an_absolute_path() {
        let t = parse_redis_url("unix:/run/redis/redis.sock").unwrap();
        assert_eq!(
            t.addr,
            RedisAddr::Unix {
                path: "/run/redis/redis.sock".to_owned()
            }
        );
        for bad in ["unix:", "unix:/", "unix:run/redis.sock"] {
            assert!(parse_redis_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bad_redis_urls_are_refused() {
        assert_eq!(parse_redis_url(""), Err(ValueError::Empty));
        for bad in [
            "localhost:6379",
            "http://h",
            "rediss://h",
            "redis://",
            "redis://:6379",
            "redis://h:",
            "redis://h:0",
            "redis://h:65536",
            "redis://h:port",
            "redis://h/65536",
            "redis://h/-1",
            "redis://h/db",
            "redis://h/0?timeout=1",
            "redis://h?x",
            "redis://h h",
            "redis://[::1",
            "redis://[::1]x",
            "redis://[zz]",
            "redis://[127.0.0.1]",
            "redis://user@h",
            "redis://user:@h",
            "redis://:p%zz@h",
            "redis://:p%4@h",
            "redis://:%ff@h",
        ] {
            assert!(parse_redis_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn redis_target_debug_hides_the_password() {
        let t = parse_redis_url("redis://app:hunter2hunter2@h").unwrap();
        let shown = format!("{t:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("<redacted>"));
        assert!(shown.contains("app"));
    }

    #[test]
    fn redis_options_default_to_50ms_100ms_and_pow_prefix() {
        assert_eq!(
            RedisOptions::default(),
            RedisOptions {
                timeout_ms: 50,
                connect_timeout_ms: 100,
                prefix: "pow:".to_owned()
            }
        );
    }

    #[test]
    fn redis_options_are_applied() {
        let mut opts = RedisOptions::default();
        apply_redis_option(&mut opts, "timeout=200ms").unwrap();
        apply_redis_option(&mut opts, "connect_timeout=1s").unwrap();
        apply_redis_option(&mut opts, "prefix=shield:v1:").unwrap();
        assert_eq!(
            opts,
            RedisOptions {
                timeout_ms: 200,
                connect_timeout_ms: 1_000,
                prefix: "shield:v1:".to_owned()
            }
        );
        apply_redis_option(&mut opts, "prefix=").unwrap();
        assert_eq!(opts.prefix, "");
    }

    #[test]
    fn redis_timeouts_are_above_0_and_at_most_60s() {
        let mut opts = RedisOptions::default();
        assert!(apply_redis_option(&mut opts, "timeout=60s").is_ok());
        assert!(apply_redis_option(&mut opts, "timeout=1ms").is_ok());
        for bad in [
            "timeout=0",
            "timeout=0ms",
            "timeout=61s",
            "connect_timeout=1m1s",
        ] {
            assert_eq!(
                apply_redis_option(&mut opts, bad),
                Err(ValueError::OutOfRange("a time above 0 and at most 60s")),
                "{bad}"
            );
        }
        assert_eq!(
            apply_redis_option(&mut opts, "timeout="),
            Err(ValueError::Empty)
        );
    }

    #[test]
    fn bad_redis_options_are_refused() {
        let mut opts = RedisOptions::default();
        for bad in [
            "timeout",
            "retries=3",
            "Timeout=1s",
            "timeout=fast",
            "prefix=has space",
            "prefix={tag}",
            "prefix=tab\t",
            "prefix=é",
        ] {
            assert!(apply_redis_option(&mut opts, bad).is_err(), "{bad}");
        }
        let long = format!("prefix={}", "p".repeat(65));
        assert!(apply_redis_option(&mut opts, &long).is_err());
        let max = format!("prefix={}", "p".repeat(64));
        assert!(apply_redis_option(&mut opts, &max).is_ok());
        assert_eq!(opts.timeout_ms, 50, "failed options change nothing");
    }

    #[test]
    fn errors_read_as_reasons() {
        assert_eq!(ValueError::Empty.to_string(), "empty value");
        assert_eq!(
            parse_difficulty("13").unwrap_err().to_string(),
            "must be between 1 and 12"
        );
        assert_eq!(
            parse_time_ms("1x").unwrap_err().to_string(),
            "not a time (examples: 500ms, 30s, 5m, 1h30m)"
        );
    }
}

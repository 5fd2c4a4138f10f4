//! `pow_shield_redis <url>[,<url>...] [option=value ...] | off`: the words
//! parsed and checked, what a refusal shows (never a password), and which
//! option a TLS failure is blamed on. Resolving names and loading TLS files
//! is the module's part.

use super::args::first;
use super::directive_error::DirectiveError;
use crate::redis::cluster::{ClientSlot, NodeAddr};
use crate::redis::url::{self, RedisAddr, RedisOptions, RedisTarget};

/// The URLs and options of `pow_shield_redis`, parsed and checked
/// against each other.
pub struct Parsed {
    pub targets: Vec<RedisTarget>,
    pub options: RedisOptions,
    /// The URL text with any password hidden, for refusals.
    pub shown: String,
}

/// `pow_shield_redis`'s words; `None` is `off`.
pub fn parse(args: &[&str]) -> Result<Option<Parsed>, DirectiveError> {
    let url = first(args);
    let options_args = args.get(1..).unwrap_or_default();
    if url == "off" {
        if let Some(extra) = options_args.first() {
            return Err(DirectiveError::invalid(extra, "\"off\" takes no options"));
        }
        return Ok(None);
    }
    let shown = redact(url);
    if let Some(why) = spaced_list(url, options_args) {
        return Err(DirectiveError::invalid(&shown, why));
    }
    let targets = url::parse_redis_urls(url).map_err(|e| DirectiveError::invalid(&shown, e))?;
    let mut options = RedisOptions::default();
    for arg in options_args {
        if arg.starts_with(',') {
            return Err(DirectiveError::invalid(&redact(arg), SPACED));
        }
        url::apply_redis_option(&mut options, arg).map_err(|e| DirectiveError::invalid(arg, e))?;
    }
    url::check_cluster(&targets, &options).map_err(|e| DirectiveError::invalid(&shown, e))?;
    if let Some(why) = slot_without_cluster(&targets, &options) {
        return Err(DirectiveError::invalid(named(options_args, "slot"), why));
    }
    Ok(Some(Parsed {
        targets,
        options,
        shown,
    }))
}

/// A seed list with a space around a comma (nginx splits words at spaces):
/// the list as written, without spaces, is what was meant.
const SPACED: &str = "a space next to a comma splits the seed list: write it without spaces \
     (redis://h1:7000,redis://h2:7000)";

/// Why the URL word `url`, followed by `options_args`, is a seed list cut
/// short by a space after a comma or ends with one; `None`: it is not.
fn spaced_list(url: &str, options_args: &[&str]) -> Option<&'static str> {
    if !url.ends_with(',') {
        return None;
    }
    // An option is `cluster` or `name=value`; anything else after the
    // comma is the rest of the list (`redis://h2:7000`, a sentinel's
    // `h2:26379/mymaster`).
    let option = |w: &str| {
        w == "cluster"
            || w.split_once('=').is_some_and(|(name, _)| {
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            })
    };
    match options_args.first() {
        Some(next) if !option(next) => Some(SPACED),
        _ => Some("the seed list ends with a comma"),
    }
}

/// Why `slot=` is refused where the URLs are no Redis Cluster's seeds;
/// `None`: it is not. The advice to add `cluster` is given only where
/// `cluster` would be taken: a sentinel's master or a UNIX socket is one
/// Redis, where every key is in one place.
fn slot_without_cluster(targets: &[RedisTarget], options: &RedisOptions) -> Option<&'static str> {
    let first = targets.first()?;
    if options.cluster || options.slot == ClientSlot::Own {
        return None;
    }
    if first.sentinel.is_some() {
        return Some(
            "slot= is for a Redis Cluster only: sentinel:// finds one master, which holds \
             every key in one place; remove slot=",
        );
    }
    match first.addr {
        RedisAddr::Unix { .. } => Some(
            "slot= is for a Redis Cluster only: a UNIX socket is one Redis (a cluster's \
             nodes are host:port); remove slot=",
        ),
        // (`into_target`'s check advises adding "cluster".)
        RedisAddr::Tcp { .. } => None,
    }
}

impl Parsed {
    /// Every URL's TCP node (with `cluster`: the seed nodes; with
    /// `sentinel://`: the sentinels), in order.
    pub fn nodes(&self) -> Vec<NodeAddr> {
        if let Some(sentinels) = self.targets.first().and_then(|t| t.sentinel.as_ref()) {
            return sentinels
                .hosts
                .iter()
                .map(|(host, port)| NodeAddr {
                    host: host.clone(),
                    port: *port,
                })
                .collect();
        }
        self.targets
            .iter()
            .filter_map(|t| match &t.addr {
                RedisAddr::Tcp { host, port } => Some(NodeAddr {
                    host: host.clone(),
                    port: *port,
                }),
                RedisAddr::Unix { .. } => None,
            })
            .collect()
    }

    /// The first URL, checked against the options (a refusal names the
    /// option at fault as written), and its address as text.
    pub fn into_target(
        self,
        url: &str,
        options_args: &[&str],
    ) -> Result<(RedisTarget, RedisOptions, String), DirectiveError> {
        // parse_redis_urls yields at least one URL (split never yields none).
        let Some(target) = self.targets.into_iter().next() else {
            return Err(DirectiveError::invalid(url, "no URL"));
        };
        url::check_options(&target, &self.options).map_err(|url::Conflict(name, e)| {
            DirectiveError::invalid(named(options_args, name), e)
        })?;
        let display = addr_text(&target.addr);
        Ok((target, self.options, display))
    }
}

/// The option `name=` as written (the last one given, as applied), or the
/// bare name when none was written.
pub fn named<'a>(options_args: &[&'a str], name: &'a str) -> &'a str {
    options_args
        .iter()
        .rev()
        .find(|a| {
            a.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('='))
        })
        .copied()
        .unwrap_or(name)
}

/// `host:port`, `[v6]:port` or `unix:/path`: what nginx's URL parser
/// takes, and what log lines show.
pub fn addr_text(addr: &RedisAddr) -> String {
    match addr {
        RedisAddr::Tcp { host, port } if host.contains(':') => format!("[{host}]:{port}"),
        RedisAddr::Tcp { host, port } => format!("{host}:{port}"),
        RedisAddr::Unix { path } => format!("unix:{path}"),
    }
}

/// A Redis URL with its credentials (everything between the scheme and
/// the last `@`) shown as `***`.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***{}", &url[..scheme], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// What a TLS context failure is blamed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsFault {
    /// `tls_cert=` (the client certificate or its key).
    Cert,
    /// `tls_ca=`.
    Ca,
    /// The URL (the system's CA bundle, or the context itself).
    Url,
}

/// Which word to name for the TLS failure `why`; `ca_written`: the CA
/// file came from `tls_ca=` (not the system's bundle).
pub fn tls_fault(why: &str, ca_written: bool) -> TlsFault {
    if why.contains("client") {
        TlsFault::Cert
    } else if why.contains("CA") && ca_written {
        TlsFault::Ca
    } else {
        TlsFault::Url
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused_value<T>(result: Result<T, DirectiveError>) -> String {
        match result {
            Err(DirectiveError::Invalid { value, .. }) => value,
            Err(other) => panic!("expected an invalid value, got {other:?}"),
            Ok(_) => panic!("expected a refusal"),
        }
    }

    #[test]
    fn redact_hides_user_and_password() {
        assert_eq!(
            redact("redis://user:secret@127.0.0.1:6379/0"),
            "redis://***@127.0.0.1:6379/0"
        );
        assert_eq!(redact("rediss://:pw@host"), "rediss://***@host");
    }

    #[test]
    fn redact_hides_up_to_the_last_at_sign() {
        assert_eq!(redact("redis://:p@ss@host:6379"), "redis://***@host:6379");
    }

    #[test]
    fn redact_leaves_a_url_without_credentials_alone() {
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("unix:/run/redis.sock"), "unix:/run/redis.sock");
        // An @ before the scheme separator is not a credential.
        assert_eq!(redact("a@b://host"), "a@b://host");
    }

    #[test]
    fn addresses_read_as_nginx_parses_them() {
        let tcp = |host: &str| RedisAddr::Tcp {
            host: host.to_owned(),
            port: 6380,
        };
        assert_eq!(addr_text(&tcp("10.0.0.1")), "10.0.0.1:6380");
        assert_eq!(addr_text(&tcp("::1")), "[::1]:6380");
        assert_eq!(
            addr_text(&RedisAddr::Unix {
                path: "/run/redis.sock".to_owned()
            }),
            "unix:/run/redis.sock"
        );
    }

    #[test]
    fn the_last_option_of_a_name_is_the_one_named() {
        let options = ["timeout=1s", "prefix=a", "timeout=2s"];
        assert_eq!(named(&options, "timeout"), "timeout=2s");
        assert_eq!(named(&options, "prefix"), "prefix=a");
        assert_eq!(named(&options, "tls_ca"), "tls_ca");
        // A longer name with the same start is another option.
        assert_eq!(named(&["tls_cafile=x"], "tls_ca"), "tls_ca");
    }

    #[test]
    fn off_takes_no_options() {
        assert!(matches!(parse(&["off"]), Ok(None)));
        assert_eq!(refused_value(parse(&["off", "timeout=1s"])), "timeout=1s");
    }

    #[test]
    fn a_bad_url_is_shown_without_its_password() {
        let shown = refused_value(parse(&["redis://u:hunter2@"]));
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    fn refusal<T>(result: Result<T, DirectiveError>) -> (String, String) {
        match result {
            Err(DirectiveError::Invalid { value, reason }) => (value, reason),
            Err(other) => panic!("expected an invalid value, got {other:?}"),
            Ok(_) => panic!("expected a refusal"),
        }
    }

    #[test]
    fn a_space_next_to_a_comma_of_the_seed_list_is_named() {
        let spaced = "a space next to a comma splits the seed list";
        for (args, value, reason) in [
            (
                &[
                    "redis://127.0.0.1:17301,",
                    "redis://127.0.0.1:17302",
                    "cluster",
                ][..],
                "redis://127.0.0.1:17301,",
                spaced,
            ),
            (
                &["redis://:pw@h1:7000,", "redis://:pw@h2:7000", "cluster"],
                "redis://***@h1:7000,",
                spaced,
            ),
            (
                &["sentinel://h1:26379,", "h2:26379/mymaster"],
                "sentinel://h1:26379,",
                spaced,
            ),
            (
                &["redis://h1:7000", ",redis://:pw@h2:7000", "cluster"],
                ",redis://***@h2:7000",
                spaced,
            ),
            (
                &["redis://h1:7000,", "cluster"],
                "redis://h1:7000,",
                "the seed list ends with a comma",
            ),
            (
                &["redis://h1:7000,", "timeout=1s"],
                "redis://h1:7000,",
                "the seed list ends with a comma",
            ),
            (
                &["redis://h1:7000,"],
                "redis://h1:7000,",
                "the seed list ends with a comma",
            ),
        ] {
            let (got, why) = refusal(parse(args));
            assert_eq!(got, value, "{args:?}");
            assert!(why.starts_with(reason), "{args:?}: {why}");
        }
        // Without spaces, the same list is taken.
        assert!(parse(&["redis://h1:7000,redis://h2:7000", "cluster"]).is_ok());
    }

    #[test]
    fn slot_names_what_it_needs_without_advice_that_is_refused_next() {
        let only = "slot= is for a Redis Cluster only";
        for (args, reason) in [
            (&["sentinel://h1:26379/mymaster", "slot=net"][..], only),
            (&["sentinels://h1:26379/mymaster", "slot=net"], only),
            (&["unix:/run/redis.sock", "slot=net"], only),
        ] {
            let (value, why) = refusal(parse(args));
            assert_eq!(value, args[1], "{args:?}");
            assert!(why.starts_with(reason), "{args:?}: {why}");
            assert!(!why.contains("add \"cluster\""), "{args:?}: {why}");
        }
        // One Redis by address: adding "cluster" is the fix (its seed).
        let parsed = parse(&["redis://h1:7000", "slot=net"])
            .ok()
            .flatten()
            .unwrap();
        let (value, why) = refusal(parsed.into_target("redis://h1:7000", &["slot=net"]));
        assert_eq!(value, "slot=net");
        assert!(why.contains("add \"cluster\""), "{why}");
        assert!(parse(&["redis://h1:7000", "cluster", "slot=net"]).is_ok());
    }

    #[test]
    fn a_bad_option_is_named_as_written() {
        assert_eq!(
            refused_value(parse(&["redis://127.0.0.1", "timeout=abc"])),
            "timeout=abc"
        );
    }

    #[test]
    fn the_target_is_the_first_url_with_its_address_text() {
        let parsed = parse(&["redis://[::1]:6380"]).ok().flatten().unwrap();
        assert_eq!(
            parsed.nodes(),
            vec![NodeAddr {
                host: "::1".to_owned(),
                port: 6380
            }]
        );
        let (target, _, display) = parsed.into_target("redis://[::1]:6380", &[]).ok().unwrap();
        assert!(!target.tls);
        assert_eq!(display, "[::1]:6380");
    }

    #[test]
    fn a_unix_socket_is_no_cluster_node() {
        let parsed = parse(&["unix:/run/redis.sock"]).ok().flatten().unwrap();
        assert!(parsed.nodes().is_empty());
    }

    #[test]
    fn tls_failures_are_blamed_on_the_option_that_names_the_file() {
        assert_eq!(
            tls_fault("cannot load the client certificate", true),
            TlsFault::Cert
        );
        assert_eq!(tls_fault("cannot load the CA file", true), TlsFault::Ca);
        // The system's bundle was not written anywhere: the URL is named.
        assert_eq!(tls_fault("cannot load the CA file", false), TlsFault::Url);
        assert_eq!(tls_fault("out of memory", true), TlsFault::Url);
    }
}

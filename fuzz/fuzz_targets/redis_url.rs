//! `pow_shield_redis <url>[,<url>...] [cluster] [option=value...]`: the
//! whole argument list through `redis::url` as the directive's setter takes
//! it (`parse_redis_urls`, `apply_redis_option` each, `check_cluster`,
//! `check_options` on the first URL, `tls_name`), on any text.
//!
//! Input: the arguments, separated by spaces.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pow_shield_core::redis::cluster::NodeAddr;
use pow_shield_core::redis::url::*;

fuzz_target!(|data: &[u8]| {
    // nginx hands directive arguments over as bytes; the glue refuses
    // anything that is not UTF-8 before parsing.
    let Ok(args) = std::str::from_utf8(data) else {
        return;
    };
    let mut args = args.split(' ');
    let urls = args.next().unwrap_or_default();
    if let Ok(target) = parse_redis_url(urls) {
        check_target(urls, &target);
    }
    let Ok(targets) = parse_redis_urls(urls) else {
        return;
    };
    assert!((1..=MAX_SEEDS).contains(&targets.len()));
    for target in &targets {
        check_target(urls, target);
    }
    let mut opts = RedisOptions::default();
    for arg in args {
        if apply_redis_option(&mut opts, arg).is_err() {
            return;
        }
    }
    assert!(opts.timeout_ms > 0 && opts.timeout_ms <= MAX_REDIS_TIMEOUT_MS);
    assert!(opts.connect_timeout_ms > 0 && opts.connect_timeout_ms <= MAX_REDIS_TIMEOUT_MS);
    assert!(opts.prefix.len() <= MAX_REDIS_PREFIX_LEN);
    assert!(!opts.prefix.contains(['{', '}', ' ']));
    if check_cluster(&targets, &opts).is_err() {
        return;
    }
    let first = &targets[0];
    if opts.cluster {
        // Seed nodes: host:port, database 0, one scheme and one user.
        for t in &targets {
            let RedisAddr::Tcp { host, port } = &t.addr else {
                panic!("a unix socket as a cluster node: {urls:?}");
            };
            assert_eq!(t.db, 0);
            assert_eq!(t.tls, first.tls);
            assert_eq!(
                (&t.username, &t.password),
                (&first.username, &first.password)
            );
            // The setter names a seed by its address text: what MOVED and
            // CLUSTER SLOTS print for the same node.
            let node = NodeAddr {
                host: host.clone(),
                port: *port,
            };
            assert_eq!(NodeAddr::parse(&node.to_string()), Some(node), "{urls:?}");
        }
    } else {
        assert_eq!(targets.len(), 1, "several URLs without cluster");
    }
    if check_options(first, &opts).is_err() {
        return;
    }
    if !first.tls {
        assert_eq!(opts.tls, TlsOptions::default(), "tls_* with redis://");
    }
    assert_eq!(opts.tls.cert.is_some(), opts.tls.key.is_some());
    match tls_name(first, &opts) {
        Some(name) => {
            assert!(first.tls);
            assert!(!name.is_empty(), "empty TLS name from {urls:?}");
        }
        None => assert!(!first.tls || matches!(first.addr, RedisAddr::Unix { .. })),
    }
});

fn check_target(urls: &str, target: &RedisTarget) {
    match &target.addr {
        RedisAddr::Tcp { host, port } => {
            assert!(!host.is_empty(), "empty host from {urls:?}");
            assert!(*port > 0, "port 0 from {urls:?}");
        }
        RedisAddr::Unix { path } => assert!(path.starts_with('/'), "relative socket {urls:?}"),
    }
    assert!(target.db <= 65_535, "db {} from {urls:?}", target.db);
    // Debug output (it may end up in log lines) redacts the password.
    if target.password.is_some() {
        assert!(format!("{target:?}").contains("password: Some(\"<redacted>\")"));
    }
}

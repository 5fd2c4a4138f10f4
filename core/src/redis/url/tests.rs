//! `parse_redis_url`, its options and the cluster checks.

use super::*;
use crate::redis::cluster::ClientSlot;

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
    let long = format!("redis://{}.example", "a".repeat(250));
    assert!(parse_redis_url(&long).is_err(), "a 258-character host");
    assert!(parse_redis_url(&format!("redis://{}", "a".repeat(253))).is_ok());
    for bad in [
        "localhost:6379",
        "http://h",
        "rediss://",
        "redis+tls://h",
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
fn a_query_string_is_refused_as_one_wherever_it_is() {
    for bad in [
        "redis://h?timeout=1s",
        "redis://h:6379?timeout=1s",
        "redis://h:6379/0?timeout=1s",
        "redis://:secret@h/2?db=3",
        "rediss://[::1]:6380?tls_verify=off",
        "redis://h?",
    ] {
        assert_eq!(
            parse_redis_url(bad),
            Err(ValueError::Syntax(QUERY_REFUSED)),
            "{bad}"
        );
    }
    assert!(QUERY_REFUSED.starts_with("query strings are not supported"));
    // a '?' in the password is the password's
    let t = parse_redis_url("redis://:pa?ss@h:6379/1").unwrap();
    assert_eq!(t.password.as_deref().map(String::as_str), Some("pa?ss"));
    assert_eq!((t.addr, t.db), (tcp("h", 6379), 1));
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
            prefix: "pow:".to_owned(),
            tls: TlsOptions::default(),
            cluster: false,
            slot: ClientSlot::Own,
            sentinel_password: None,
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
            prefix: "shield:v1:".to_owned(),
            tls: TlsOptions::default(),
            cluster: false,
            slot: ClientSlot::Own,
            sentinel_password: None,
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
        "tls_ca=",
        "tls_verify=yes",
        "tls_name=",
        "tls_name=a b",
        "tls_cert=",
        "tls_key=",
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
fn rediss_is_tls_with_every_part_of_a_redis_url() {
    let t = parse_redis_url("rediss://app:pw@redis.example:6380/1").unwrap();
    assert!(t.tls);
    assert_eq!(t.addr, tcp("redis.example", 6380));
    assert_eq!((t.username.as_deref(), t.db), (Some("app"), 1));
    assert!(!parse_redis_url("redis://h").unwrap().tls);
}

fn options(args: &[&str]) -> RedisOptions {
    let mut opts = RedisOptions::default();
    for arg in args {
        apply_redis_option(&mut opts, arg).unwrap();
    }
    opts
}

#[test]
fn tls_verifies_by_default_against_the_url_host() {
    let t = parse_redis_url("rediss://redis.example").unwrap();
    let opts = RedisOptions::default();
    assert!(opts.tls.verify && opts.tls.ca.is_none());
    assert_eq!(tls_name(&t, &opts), Some("redis.example"));
    assert_eq!(check_options(&t, &opts), Ok(()));
}

#[test]
fn tls_options_are_applied() {
    let t = parse_redis_url("rediss://10.0.0.5").unwrap();
    let opts = options(&[
        "tls_ca=ca.pem",
        "tls_verify=off",
        "tls_name=redis.internal",
        "tls_cert=/etc/c.pem",
        "tls_key=/etc/k.pem",
    ]);
    assert_eq!(opts.tls.ca.as_deref(), Some("ca.pem"));
    assert!(!opts.tls.verify);
    assert_eq!(tls_name(&t, &opts), Some("redis.internal"));
    assert_eq!(opts.tls.cert.as_deref(), Some("/etc/c.pem"));
    assert_eq!(opts.tls.key.as_deref(), Some("/etc/k.pem"));
    assert_eq!(check_options(&t, &opts), Ok(()));
}

#[test]
fn tls_options_need_rediss() {
    let plain = parse_redis_url("redis://h").unwrap();
    for (arg, name) in [
        ("tls_ca=ca.pem", "tls_ca"),
        ("tls_verify=off", "tls_verify"),
        ("tls_name=x", "tls_name"),
    ] {
        let err = check_options(&plain, &options(&[arg])).unwrap_err();
        assert_eq!(err.0, name);
    }
    let unix = parse_redis_url("unix:/run/redis.sock").unwrap();
    assert!(check_options(&unix, &options(&["tls_ca=ca.pem"])).is_err());
    assert_eq!(tls_name(&plain, &RedisOptions::default()), None);
}

#[test]
fn a_client_certificate_needs_its_key_and_the_other_way_round() {
    let t = parse_redis_url("rediss://h").unwrap();
    assert_eq!(
        check_options(&t, &options(&["tls_cert=c.pem"]))
            .unwrap_err()
            .0,
        "tls_cert"
    );
    assert_eq!(
        check_options(&t, &options(&["tls_key=k.pem"]))
            .unwrap_err()
            .0,
        "tls_key"
    );
}

#[test]
fn several_urls_are_cluster_seeds() {
    let seeds = parse_redis_urls("redis://10.0.0.1:7000,redis://10.0.0.2:7001").unwrap();
    assert_eq!(seeds.len(), 2);
    assert_eq!(seeds[1].addr, tcp("10.0.0.2", 7001));
    let cluster = options(&["cluster"]);
    assert!(cluster.cluster);
    assert_eq!(check_cluster(&seeds, &cluster), Ok(()));
    assert!(
        check_cluster(&seeds, &RedisOptions::default()).is_err(),
        "several URLs without \"cluster\""
    );
    let one = parse_redis_urls("redis://h").unwrap();
    assert_eq!(check_cluster(&one, &RedisOptions::default()), Ok(()));
    assert_eq!(check_cluster(&one, &cluster), Ok(()));
}

#[test]
fn cluster_seeds_are_tcp_db_0_and_alike() {
    let cluster = options(&["cluster"]);
    for bad in [
        "unix:/run/redis.sock",
        "redis://h/1",
        "redis://a,rediss://b",
        "redis://:pw@a,redis://b",
        "redis://u:pw@a,redis://v:pw@b",
    ] {
        let seeds = parse_redis_urls(bad).unwrap();
        assert!(check_cluster(&seeds, &cluster).is_err(), "{bad}");
    }
    assert!(parse_redis_urls("redis://a,").is_err());
    let many = vec!["redis://h"; 17].join(",");
    assert!(parse_redis_urls(&many).is_err());
}

#[test]
fn sentinel_url_names_the_sentinels_and_the_master() {
    let t = parse_redis_url("sentinel://10.0.0.1:26380,s2,[::1]/mymaster").unwrap();
    let s = t.sentinel.as_ref().unwrap();
    assert_eq!(s.master, "mymaster");
    assert_eq!(
        s.hosts,
        [
            ("10.0.0.1".to_owned(), 26380),
            ("s2".to_owned(), 26379),
            ("::1".to_owned(), 26379)
        ]
    );
    assert_eq!(t.addr, tcp("10.0.0.1", 26380), "the first sentinel");
    assert_eq!((t.db, t.tls), (0, false));
}

#[test]
fn sentinel_url_credentials_and_database_are_the_masters() {
    let t = parse_redis_url("sentinels://app:pw@s1:5000/cache/3").unwrap();
    assert_eq!(t.username.as_deref(), Some("app"));
    assert_eq!(t.password.as_deref().map(String::as_str), Some("pw"));
    assert_eq!((t.db, t.tls), (3, true));
    assert_eq!(parse_redis_urls("sentinel://a,b/m").unwrap().len(), 1);
}

#[test]
fn sentinel_url_needs_a_master_name_and_valid_hosts() {
    for bad in [
        "sentinel://s1",
        "sentinel://s1/",
        "sentinel://s1/my master",
        "sentinel://s1,,s2/m",
        "sentinel://s1:0/m",
        "sentinel://s1:99999/m",
        "sentinel://bad host/m",
        "sentinel://s1/m?x=1",
        "sentinel://s1/m/99999",
    ] {
        assert!(parse_redis_url(bad).is_err(), "{bad}");
    }
    let many = format!("sentinel://{}/m", vec!["s"; 17].join(","));
    assert!(parse_redis_url(&many).is_err());
}

#[test]
fn sentinel_options_go_with_sentinel_urls_only() {
    let sentinel = parse_redis_url("sentinel://s1/m").unwrap();
    let plain = parse_redis_url("redis://h").unwrap();
    let mut opts = RedisOptions::default();
    apply_redis_option(&mut opts, "sentinel_password=s%3Acret").unwrap();
    assert_eq!(
        opts.sentinel_password.as_ref().map(|p| p.0.as_str()),
        Some("s:cret")
    );
    assert!(!format!("{opts:?}").contains("cret"), "never shown");
    assert!(check_options(&sentinel, &opts).is_ok());
    assert_eq!(
        check_options(&plain, &opts).unwrap_err().0,
        "sentinel_password"
    );
    assert!(apply_redis_option(&mut opts, "sentinel_password=").is_err());
    let mut cluster = RedisOptions::default();
    apply_redis_option(&mut cluster, "cluster").unwrap();
    assert!(check_cluster(std::slice::from_ref(&sentinel), &cluster).is_err());
    let mut tls = RedisOptions::default();
    apply_redis_option(&mut tls, "tls_verify=off").unwrap();
    assert!(
        check_options(&sentinel, &tls).is_err(),
        "TLS needs sentinels://"
    );
    let secure = parse_redis_url("sentinels://s1/m").unwrap();
    assert!(check_options(&secure, &tls).is_ok());
}

#[test]
fn slot_net_places_a_clients_keys_in_its_networks_slot_of_a_redis_cluster_only() {
    let cluster = parse_redis_url("redis://h").unwrap();
    let mut opts = RedisOptions::default();
    apply_redis_option(&mut opts, "slot=net").unwrap();
    assert_eq!(opts.slot, ClientSlot::Net);
    assert_eq!(
        check_options(&cluster, &opts).unwrap_err().0,
        "slot",
        "one Redis has no slots"
    );
    apply_redis_option(&mut opts, "cluster").unwrap();
    assert_eq!(check_options(&cluster, &opts), Ok(()));
    apply_redis_option(&mut opts, "slot=client").unwrap();
    assert_eq!(opts.slot, ClientSlot::Own);
    for bad in ["slot=", "slot=Net", "slot=24", "slot=own"] {
        assert!(apply_redis_option(&mut opts, bad).is_err(), "{bad}");
    }
}

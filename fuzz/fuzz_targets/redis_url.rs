//! `pow_shield_redis <url>`: `redis::url::parse_redis_url` on any text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pow_shield_fuzz::redis::url::{parse_redis_url, RedisAddr};

fuzz_target!(|data: &[u8]| {
    // nginx hands directive arguments over as bytes; the glue refuses
    // anything that is not UTF-8 before parsing.
    let Ok(url) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(target) = parse_redis_url(url) else {
        return;
    };
    match &target.addr {
        RedisAddr::Tcp { host, port } => {
            assert!(!host.is_empty(), "empty host from {url:?}");
            assert!(*port > 0, "port 0 from {url:?}");
        }
        RedisAddr::Unix { path } => assert!(path.starts_with('/'), "relative socket {url:?}"),
    }
    assert!(target.db <= 65_535, "db {} from {url:?}", target.db);
    // Debug output (it may end up in log lines) redacts the password.
    if target.password.is_some() {
        assert!(format!("{target:?}").contains("password: Some(\"<redacted>\")"));
    }
});

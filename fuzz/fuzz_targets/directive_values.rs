//! Every directive value parser of `config::values` (and the key parsers of
//! `pow_shield_secret` / `pow_shield_secret_file`), on any value.
//!
//! Input: one byte choosing the parser, then the value. `pow_shield_limit`
//! takes two words: split at the first space.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pow_shield_fuzz::config::values::*;
use pow_shield_fuzz::pow::{Secret, SecretKeys, MAX_DIFFICULTY, MIN_DIFFICULTY};

fuzz_target!(|data: &[u8]| {
    let [which, value @ ..] = data else {
        return;
    };
    // Key material is bytes; every other value must be UTF-8 (the glue
    // refuses anything else before parsing).
    match which % 10 {
        0 => {
            let _ = SecretKeys::from_file_contents(value);
            return;
        }
        1 => {
            let _ = Secret::new(value);
            return;
        }
        _ => {}
    }
    let Ok(s) = std::str::from_utf8(value) else {
        return;
    };
    match which % 10 {
        2 => {
            let _ = parse_time_ms(s);
        }
        3 => {
            let _ = parse_size(s);
        }
        4 => {
            let (requests, window) = s.split_once(' ').unwrap_or((s, ""));
            if let Ok(limit) = parse_limit(requests, window) {
                assert!((MIN_LIMIT_REQUESTS..=MAX_LIMIT_REQUESTS).contains(&limit.requests));
                assert!((MIN_LIMIT_WINDOW_MS..=MAX_LIMIT_WINDOW_MS).contains(&limit.window_ms));
                assert_eq!(limit.window_ms % 1_000, 0);
            }
        }
        5 => {
            if let Ok(d) = parse_difficulty(s) {
                assert!((MIN_DIFFICULTY..=MAX_DIFFICULTY).contains(&d));
            }
        }
        6 => {
            let _ = parse_headers_mode(s);
        }
        7 => {
            let _ = parse_fail_policy(s);
        }
        8 => {
            let mut opts = RedisOptions::default();
            for arg in s.split(' ') {
                if apply_redis_option(&mut opts, arg).is_ok() {
                    assert!(opts.timeout_ms > 0 && opts.timeout_ms <= MAX_REDIS_TIMEOUT_MS);
                    assert!(opts.connect_timeout_ms > 0);
                    assert!(opts.connect_timeout_ms <= MAX_REDIS_TIMEOUT_MS);
                    assert!(opts.prefix.len() <= MAX_REDIS_PREFIX_LEN);
                    assert!(!opts.prefix.contains(['{', '}', ' ']));
                }
            }
        }
        _ => {
            let _ = parse_redis_url(s);
        }
    }
});

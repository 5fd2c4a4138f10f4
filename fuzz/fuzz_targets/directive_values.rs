//! Every directive value parser of `config::values` and `redis::url` (and the key parsers of
//! `pow_shield_secret` / `pow_shield_secret_file`), on any value.
//!
//! Input: one byte choosing the parser, then the value. Directives with two
//! words (`pow_shield_limit`, `pow_shield_difficulty <n> max=<m>`,
//! `pow_shield_strikes`, `pow_shield_ban`) split it at the first space.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pow_shield_core::config::args::{ban, limit, strikes};
use pow_shield_core::config::values::*;
use pow_shield_core::limiter::breaker::{Block, BreakerRules, StrikeCounter};
use pow_shield_core::protocol::{Secret, SecretKeys, MAX_BITS, MIN_BITS};
use pow_shield_core::redis::url::*;
use pow_shield_core::syntax::{parse_size, parse_time_ms};

/// Parsers the first byte chooses from (`which % PARSERS`).
const PARSERS: u8 = 14;

fuzz_target!(|data: &[u8]| {
    let [which, value @ ..] = data else {
        return;
    };
    // Key material is bytes; every other value must be UTF-8 (the glue
    // refuses anything else before parsing).
    match which % PARSERS {
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
    let (first, second) = s.split_once(' ').unwrap_or((s, ""));
    match which % PARSERS {
        2 => {
            let _ = parse_time_ms(s);
        }
        3 => {
            let _ = parse_size(s);
        }
        4 => {
            if let Ok(Some(line)) = limit(&[first, second]) {
                let limit = line.limit;
                assert!((MIN_LIMIT_REQUESTS..=MAX_LIMIT_REQUESTS).contains(&limit.requests));
                assert!((MIN_LIMIT_WINDOW_MS..=MAX_LIMIT_WINDOW_MS).contains(&limit.window_ms));
                assert_eq!(limit.window_ms % 1_000, 0);
            }
        }
        5 => {
            if let Ok(d) = parse_difficulty(s) {
                assert!((MIN_BITS..=MAX_BITS).contains(&d.bits));
                // Hex digits are whole nibbles.
                assert!(d.in_bits || d.bits % 4 == 0);
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
        9 => {
            let _ = parse_redis_url(s);
        }
        10 => {
            if let Ok(base) = parse_difficulty(first) {
                if let Ok(max) = parse_difficulty_max(second, base) {
                    assert!((base.bits..=MAX_BITS).contains(&max.bits));
                }
            }
        }
        11 => {
            if let Ok(Some(rule)) = strikes(&[first, second]) {
                assert!((1..=MAX_STRIKES).contains(&rule.threshold));
                assert!((1_000..=86_400_000).contains(&rule.ttl_ms));
                // A parsed rule behaves: `threshold` strikes open the
                // breaker, which stays open until `ttl` after the last.
                if rule.threshold <= 64 {
                    let rules = BreakerRules {
                        strikes: Some(rule),
                        ban: None,
                    };
                    let mut state = StrikeCounter::default();
                    for _ in 0..rule.threshold {
                        assert_eq!(state.strike(rules, 5).block, Block::Clear);
                    }
                    assert_eq!(state.block(rules, 5 + rule.ttl_ms - 1), Block::Blocked);
                    assert_eq!(state.block(rules, 5 + rule.ttl_ms), Block::Clear);
                }
            }
        }
        12 => {
            if let Ok(Some(ban)) = ban(&[first, second]) {
                assert!((1..=1_000).contains(&ban.after));
                assert!((1_000..=86_400_000).contains(&ban.ttl_ms));
            }
        }
        _ => {
            if let Ok(status) = parse_block_status(s) {
                assert!((400..=599).contains(&status));
            }
        }
    }
});

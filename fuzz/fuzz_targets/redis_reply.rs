//! Bytes a Redis peer (or anything at its address) may send, read the way
//! the client reads them: reply after reply from one buffer, each through
//! `decode_reply`, `integers` and the sliding-window verdict.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pow_shield_fuzz::limiter::window::verdict_from_reply;
use pow_shield_fuzz::limiter::RateLimit;
use pow_shield_fuzz::redis::command::{decode_reply, integers, is_noscript, Decoded};

const LIMIT: RateLimit = RateLimit {
    requests: 10,
    window_ms: 60_000,
};

fuzz_target!(|data: &[u8]| {
    // Partial and Corrupt end the reading, as they end the client's.
    let mut rest = data;
    while let Decoded::Frame(frame, used) = decode_reply(rest) {
        assert!(
            used > 0 && used <= rest.len(),
            "used {used} of {}",
            rest.len()
        );
        rest = &rest[used..];
        let _ = is_noscript(&frame);
        if let Some(reply) = integers(&frame) {
            if let Ok(verdict) = verdict_from_reply(&reply, LIMIT) {
                assert!(verdict.remaining <= LIMIT.requests);
            }
        }
    }
});

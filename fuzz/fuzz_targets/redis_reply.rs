//! Bytes a Redis peer (or anything at its address) may send, read the way
//! the client reads them: reply after reply from one buffer, each through
//! `decode_reply` (compared with the general path, each script answer's
//! box given back for the next as the client does), its integers, the
//! sliding-window verdict and the strike script's breaker.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pow_shield_core::limiter::breaker::Block;
use pow_shield_core::cluster::scripts::replies::{standing_from_reply, verdict_from_reply};
use pow_shield_core::limiter::RateLimit;
use pow_shield_core::redis::command::{
    decode_reply, decode_reply_in, is_noscript, scan_then_decode, Decoded, Rooms,
};

const LIMIT: RateLimit = RateLimit {
    requests: 10,
    window_ms: 60_000,
};

fuzz_target!(|data: &[u8]| {
    // The one-pass reading of a script's integers answers as the general
    // path would (a corrupt reply may say why differently).
    match (decode_reply(data), scan_then_decode(data)) {
        (Decoded::Corrupt(_), Decoded::Corrupt(_)) => {}
        (ours, theirs) => assert_eq!(ours, theirs),
    }
    // Partial and Corrupt end the reading, as they end the client's.
    let mut rest = data;
    let mut rooms = Rooms::default();
    while let Decoded::Frame(frame, used) = decode_reply_in(rest, &mut rooms) {
        assert!(
            used > 0 && used <= rest.len(),
            "used {used} of {}",
            rest.len()
        );
        // Read into a box a reply before gave back: the same.
        assert_eq!(Decoded::Frame(frame.clone(), used), scan_then_decode(rest));
        rest = &rest[used..];
        let _ = is_noscript(&frame);
        if let Some(reply) = frame.integers() {
            if let Ok((verdict, breaker)) = verdict_from_reply(reply, LIMIT) {
                assert!(verdict.remaining <= LIMIT.requests);
                // Counts beyond u32 saturate.
                let strikes = u32::try_from(reply[5]).unwrap_or(u32::MAX);
                assert_eq!(breaker.strikes, strikes);
                assert_eq!(Ok(breaker.block_ms), u64::try_from(reply[7]));
                assert_eq!(breaker.tripped.is_some(), reply[8] != 0);
            }
            if let Ok(breaker) = standing_from_reply(reply) {
                let block = [Block::Clear, Block::Blocked, Block::Banned];
                let index = usize::try_from(reply[1]).ok();
                assert_eq!(Some(&breaker.block), index.and_then(|i| block.get(i)));
                assert_eq!(Ok(breaker.block_ms), u64::try_from(reply[2]));
                assert_eq!(breaker.tripped.is_some(), reply[3] != 0);
            }
        }
        rooms.give_back(frame);
    }
});

//! Every reply of the cluster-mode scripts the store reads
//! (`cluster::scripts::replies`, `cluster::calls`, `cluster::generation`):
//! a one-limit check (with a Redis Cluster's slot generation after it), the
//! stacked check (all of a location's limits, or those a request is
//! counted by), a coalesced check of `k` requests and each request's share
//! of it, the strike, spend and batch scripts, and the generation key's
//! value. Whatever Redis (or anything at its address) answers, a decoder
//! either refuses it or gives values within what the script can mean.
//!
//! Input: `config`, `k`, `scale`, then the replies. `config` bits 0-1: the
//! location's limits (1-4), bit 2: a Redis Cluster, bits 3-4: the offence,
//! bit 5: strikes on, bit 6: a ban rule, bit 7: the replies are compact
//! (each byte one integer, `byte - 2`, so that small values, the ones
//! scripts answer, come often; each decoder also gets the prefix of the
//! length it wants), else RESP frames as Redis sends them. `k` (1-64):
//! requests of a coalesced call, its low 4 bits also which limits a
//! request is counted by. `scale`: the limits' sizes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pow_shield_core::cluster::scripts::replies::{
    self, batch_text, batches_from_reply, coalesced_from_reply, spent_from_reply,
    split_generation, standing_from_reply, struck_from_reply, MAX_COALESCED,
};
use pow_shield_core::cluster::{calls, generation};
use pow_shield_core::limiter::breaker::{BanRule, Block, BreakerRules, StrikeRule};
use pow_shield_core::limiter::{Limits, RateLimit};
use pow_shield_core::redis::command::{decode_reply, Decoded};
use pow_shield_core::store::{Offence, Reply, Spent};
use redis_protocol::resp2::types::OwnedFrame;

/// The lengths the decoders want: the strike and spend scripts' 4, a
/// batch's 5 a client, the stacked script's 10 and the one-limit one's 10
/// (each +1 with a slot generation).
const LENGTHS: [usize; 7] = [4, 5, 9, 10, 11, 15, 20];

struct Setup {
    limits: Limits,
    cluster: bool,
    offence: Offence,
    rules: BreakerRules,
    k: u32,
    /// Which limits a request is counted by (a `key=` value may be empty).
    counted: u8,
}

impl Setup {
    fn new(config: u8, k: u8, scale: u8) -> Setup {
        let mut limits = Limits::NONE;
        for i in 0..=u32::from(config & 3) {
            let limit = RateLimit {
                requests: 1 + u32::from(scale) * 1000 + i,
                window_ms: 1_000 * u64::from(1 + i),
            };
            limits.push(limit, None).expect("distinct limits stack");
        }
        let offence = match (config >> 3) & 3 {
            0 => Offence::None,
            1 => Offence::Unpaid,
            _ => Offence::Failed,
        };
        let rules = BreakerRules {
            strikes: (config & 0x20 != 0).then_some(StrikeRule {
                threshold: 5,
                ttl_ms: 60_000,
            }),
            ban: (config & 0x40 != 0).then_some(BanRule {
                after: 3,
                ttl_ms: 3_600_000,
            }),
        };
        Setup {
            limits,
            cluster: config & 4 != 0,
            offence,
            rules,
            k: 1 + u32::from(k) % MAX_COALESCED as u32,
            counted: k & 0x0f,
        }
    }

    fn reply(&self, reply: &[i64]) {
        self.checks(reply);
        self.coalesced(reply);
        self.scripts(reply);
    }

    /// The check scripts: one limit, stacked, stacked for the counted.
    fn checks(&self, reply: &[i64]) {
        let limit = self.limits.get(0).expect("at least one limit");
        let one = replies::checked_from_reply(reply, limit, self.cluster);
        if let Ok(c) = &one {
            assert!(c.verdict.remaining <= limit.requests, "remaining above the limit");
            assert!(!c.struck || (!c.verdict.allowed && c.breaker.block == Block::Clear));
            assert!(c.generation.is_none_or(|g| g > 0 && self.cluster));
            assert_eq!(c.generation, split_generation(reply, self.cluster).1);
        }
        let stacked = replies::stacked_checked_from_reply(
            reply,
            &self.limits,
            self.offence,
            self.rules,
            self.cluster,
        );
        if let Ok(c) = &stacked {
            let at = usize::from(c.verdict.limit);
            let decided = self.limits.get(at).expect("the deciding limit is a limit");
            assert!(c.verdict.remaining <= decided.requests);
            assert!(!c.struck || (self.offence != Offence::None && !c.verdict.allowed));
            assert!(!c.struck || self.rules.strikes.is_some());
        }
        // What the store calls picks the decoder by the number of limits.
        let picked = calls::checked(self.cluster, reply, &self.limits, self.rules, self.offence);
        let expected = if self.limits.len() == 1 { one.ok() } else { stacked.ok() };
        assert_eq!(picked, expected);

        let (kept, at) = self.limits.only(|i| self.counted & (1 << i) != 0);
        let counted =
            calls::stacked_checked(self.cluster, reply, (&kept, &at), self.rules, self.offence);
        if let Some(c) = counted {
            if kept.is_empty() {
                assert!(!c.struck, "a request counted by no limit is never struck");
                assert_eq!(c.verdict.allowed, c.breaker.block == Block::Clear);
            } else {
                let i = usize::from(c.verdict.limit);
                assert!(i < self.limits.len(), "names a limit of the location");
                assert!(at[..kept.len()].contains(&c.verdict.limit));
            }
        }
    }

    /// A coalesced check of `k` requests, and each request's answer.
    fn coalesced(&self, reply: &[i64]) {
        let limit = self.limits.get(0).expect("at least one limit");
        let Ok(c) = coalesced_from_reply(reply, limit, self.k) else {
            return;
        };
        assert!(c.admitted <= self.k && c.struck <= self.k - c.admitted);
        assert!(c.verdict.remaining <= limit.requests);
        let mut struck = 0;
        for i in 0..self.k {
            let n = c.nth(i, self.k, self.rules);
            if c.breaker.block != Block::Clear {
                assert!(!n.verdict.allowed && !n.struck, "a blocked client is blocked");
                continue;
            }
            assert_eq!(n.verdict.allowed, i < c.admitted, "request {i} of {}", self.k);
            assert!(
                n.verdict.remaining <= limit.requests,
                "request {i} of {}: Remaining {} above the limit {}",
                self.k,
                n.verdict.remaining,
                limit.requests
            );
            assert!(!n.struck || !n.verdict.allowed);
            struck += u32::from(n.struck);
        }
        if c.breaker.block == Block::Clear {
            assert_eq!(struck, c.struck, "the requests' strikes are the call's");
        }
    }

    /// The strike, spend and batch scripts.
    fn scripts(&self, reply: &[i64]) {
        if let Ok(s) = struck_from_reply(reply, self.rules) {
            assert!(!s.struck || (s.breaker.block == Block::Clear && self.rules.strikes.is_some()));
            assert_eq!(standing_from_reply(reply).ok(), Some(s.breaker));
        }
        assert_eq!(
            calls::struck_reply(reply, self.rules),
            struck_from_reply(reply, self.rules).ok().map(Reply::Struck)
        );
        if let Ok(b) = standing_from_reply(reply) {
            let blocks = [Block::Clear, Block::Blocked, Block::Banned];
            let index = usize::try_from(reply[1]).ok();
            assert_eq!(Some(&b.block), index.and_then(|i| blocks.get(i)));
            assert_eq!(Ok(b.block_ms), u64::try_from(reply[2]));
        }
        match spent_from_reply(reply) {
            Ok(Spent::Blocked(b)) => assert_ne!(b.block, Block::Clear),
            Ok(Spent::Accepted(b)) => assert_eq!(b.block, Block::Clear),
            Ok(Spent::Replayed) => assert_eq!(reply[0], 0),
            Ok(other @ Spent::NotRecorded { .. }) => {
                panic!("the spend decoder never says {other:?}")
            }
            Err(_) => {}
        }
        match calls::spent_reply(reply) {
            Err(gen) => {
                assert!(generation::is_stale(reply));
                assert!(gen.is_none_or(|g| g > 0 && i64::try_from(g).ok() == reply.get(4).copied()));
            }
            Ok(spent) => {
                assert!(!generation::is_stale(reply));
                assert_eq!(spent, spent_from_reply(reply).ok());
            }
        }
        if replies::batch_from_reply(reply).is_ok() {
            assert_eq!(reply.len(), 5);
        }
        let clients = reply.len() / 5;
        if let Ok(all) = batches_from_reply(reply, clients) {
            assert_eq!(all.len(), clients);
        }
    }
}

/// A bulk or simple string: the batch script's text form and the
/// generation key's value.
fn text(setup: &Setup, frame: &OwnedFrame) {
    if let Some((value, gen)) = generation::from_reply(frame) {
        let text = core::str::from_utf8(&value).expect("a generation is text");
        let (_, number) = text.rsplit_once(':').expect("run id:number");
        assert_eq!(number.parse::<u64>().ok(), Some(gen));
    }
    if let OwnedFrame::BulkString(bytes) = frame {
        if let Some(numbers) = batch_text(bytes) {
            assert_eq!(numbers.len(), bytes.split(|b| *b == b' ').count());
            setup.reply(&numbers);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [config, k, scale, rest @ ..] = data else {
        return;
    };
    let setup = Setup::new(*config, *k, *scale);
    if config & 0x80 != 0 {
        let reply: Vec<i64> = rest.iter().map(|b| i64::from(*b) - 2).collect();
        setup.reply(&reply);
        for n in LENGTHS {
            if let Some(prefix) = reply.get(..n) {
                setup.reply(prefix);
            }
        }
        return;
    }
    let mut rest = rest;
    while let Decoded::Frame(frame, used) = decode_reply(rest) {
        rest = &rest[used..];
        if let Some(reply) = frame.integers() {
            setup.reply(reply);
        }
        text(&setup, &frame.into_owned());
    }
});

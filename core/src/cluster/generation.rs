//! One spend per solution through flushes, failovers and outages
//! (docs/operations.md, "Choosing a fail policy"): tokens carry the data
//! generation they were issued in, and a node accepts a solution only
//! within a generation that holds its spent records (pure, unit-tested).
//!
//! - Redis's generation is a number kept at `<prefix>gen` with the run id
//!   of the Redis that holds it (`run_id:number`): the first node to find
//!   it missing (an empty restart, `FLUSHALL`) or written by another run
//!   (a restart, a promoted replica, whose data may lack the last spends)
//!   writes a new one; every node reads the same. The spend runs in it
//!   atomically (`Scripts::gen_spend`), so a spend recorded before a flush
//!   or a failover is never forgotten silently.
//! - A Redis Cluster keeps one per slot, at `<prefix>gen:{<n>}` (`n`
//!   chosen so that the key hashes to the slot, [`slot_key`]), beside the
//!   keys of that slot's clients, in the same form. A Redis Cluster's
//!   check scripts (`Scripts::for_mode(true)`): a refusal's reply ends with it
//!   (created if missing), so the 429's challenge carries it without
//!   another round trip; the spend checks it atomically
//!   (`Scripts::for_mode(true).gen_spend`) and renews it when another run of Redis
//!   wrote it (a failover, a restart). `INFO` costs about 13 µs inside a
//!   script: only the spend and a missing key call it, never the green path.
//! - While Redis is unavailable, a node issues and accepts only its own
//!   local generation: what its zone spent is all it knows.

use std::sync::LazyLock;

use redis_protocol::resp2::types::OwnedFrame;

use crate::redis::cluster::{crc16, SLOTS};

/// Whether a generation spend's reply says the generation is gone.
pub fn is_stale(reply: &[i64]) -> bool {
    reply.first() == Some(&-1)
}

/// The slot's generation a stale slot spend answered.
pub fn stale_generation(reply: &[i64]) -> Option<u64> {
    let gen = *reply.get(4)?;
    u64::try_from(gen).ok().filter(|g| *g > 0)
}

/// For each slot, the decimal of the smallest `n` that hashes to it and
/// `}`, as its generation key ends ([`write_slot_key`]): its length, then
/// those bytes (every slot has an `n` under 1,000,000: six digits at most).
static SLOT_TAGS: LazyLock<Box<[[u8; 8]]>> = LazyLock::new(|| {
    let mut tags = vec![[0; 8]; SLOTS].into_boxed_slice();
    let (mut left, mut n) = (SLOTS, 0u32);
    let mut text = Vec::with_capacity(10);
    while left > 0 {
        text.clear();
        crate::redis::script_call::decimal(&mut text, n.into());
        let slot = usize::from(crc16(&text)) % SLOTS;
        text.push(b'}');
        if let Some(tag @ [0, ..]) = tags.get_mut(slot) {
            if let Some(room) = tag.get_mut(1..=text.len()) {
                room.copy_from_slice(&text);
                tag[0] = text.len() as u8;
                left -= 1;
            }
        }
        n += 1;
    }
    tags
});

/// The slot of a client's keys (`tag`: what its keys have inside
/// `<prefix>{...}`; with `slot=net`, up to a `}`:
/// `crate::redis::cluster::route_slot`).
pub fn slot_of_tag(tag: &[u8]) -> u16 {
    crate::redis::cluster::route_slot(tag)
}

/// Writes the generation key of `slot`: `<prefix>gen:{<n>}`.
pub fn write_slot_key(w: &mut Vec<u8>, prefix: &[u8], slot: u16) {
    w.extend_from_slice(prefix);
    w.extend_from_slice(b"gen:{");
    // (Written once: measured, the decimal of `n` made each time cost
    // more than half of this.)
    let end = SLOT_TAGS
        .get(usize::from(slot))
        .and_then(|tag| tag.get(1..=usize::from(tag[0])));
    w.extend_from_slice(end.unwrap_or(b"0}"));
}

/// The generation key of `slot`, as text.
pub fn slot_key(prefix: &str, slot: u16) -> String {
    let mut w = Vec::new();
    write_slot_key(&mut w, prefix.as_bytes(), slot);
    String::from_utf8_lossy(&w).into_owned()
}

/// The key's value the script answered (or a `GET` of it), and the
/// generation in it.
pub fn from_reply(frame: &OwnedFrame) -> Option<(Vec<u8>, u64)> {
    let (OwnedFrame::BulkString(value) | OwnedFrame::SimpleString(value)) = frame else {
        return None;
    };
    let text = core::str::from_utf8(value).ok()?;
    let (_, generation) = text.rsplit_once(':')?;
    Some((value.clone(), generation.parse().ok()?))
}

/// What one worker knows of the generations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generations {
    /// Redis's, while Redis answers and it is known (`None` in a Redis
    /// Cluster: each slot has its own, answered by the check).
    pub redis: Option<u64>,
    /// This node's own, for challenges issued while Redis is unavailable.
    pub local: u64,
    /// Redis answers now.
    pub redis_up: bool,
    /// A Redis Cluster: each slot has its generation, which the check
    /// answers and the spend checks (the decision compares it with the
    /// token's in between).
    pub cluster: bool,
}

impl Generations {
    /// The generation a challenge issued now carries, unless the check
    /// answered the client's (a Redis Cluster slot's).
    pub fn for_challenge(&self) -> Option<u64> {
        match (self.redis_up, self.redis) {
            (true, Some(gen)) if !self.cluster => Some(gen),
            _ => Some(self.local),
        }
    }

    /// The generation a solution of a challenge issued in `token` is spent
    /// in: none for one this node issued during an outage (its zone has any
    /// spend of it, and Redis once it is written there).
    pub fn spent_in(&self, token: Option<u64>) -> Option<u64> {
        token.filter(|gen| *gen != self.local)
    }

    /// Whether `token` is older than the generation one Redis has now
    /// (a flush or failover since): it never will be spent (an old token
    /// sent again is no payment). A newer one is news, not age.
    pub fn outdated(&self, token: Option<u64>) -> bool {
        match (token, self.redis) {
            (Some(gen), Some(now)) => {
                self.redis_up && !self.cluster && gen != self.local && gen < now
            }
            _ => false,
        }
    }

    /// Whether a solution of a challenge issued in `token` may be spent
    /// now; if not, the client gets a fresh challenge instead.
    pub fn accepts(&self, token: Option<u64>) -> bool {
        if token == Some(self.local) {
            // Issued here during an outage: this node's zone has any spend
            // of it (and Redis, once it is written there).
            return true;
        }
        if !self.redis_up {
            // An outage: spends made through Redis are unknown here.
            return false;
        }
        match (token, self.redis) {
            // A token without one: from a Redis Cluster, local mode, or a
            // node that predates generations (a rolling upgrade).
            (None, _) => true,
            // The slot's: the check answers it, the spend checks it.
            (Some(_), _) if self.cluster => true,
            (Some(gen), Some(now)) => gen == now,
            // Not known yet (the worker just connected).
            (Some(_), None) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn single(redis: Option<u64>, up: bool) -> Generations {
        Generations {
            redis,
            local: 7,
            redis_up: up,
            cluster: false,
        }
    }

    #[test]
    fn while_redis_answers_only_its_generation_and_our_own_outage_challenges_are_spent() {
        let g = single(Some(100), true);
        assert_eq!(g.for_challenge(), Some(100));
        assert!(g.accepts(Some(100)));
        assert!(g.accepts(Some(7)), "issued here during an outage");
        assert!(!g.accepts(Some(99)), "before a flush or failover");
        assert!(!g.accepts(Some(8)), "another node's outage challenge");
        assert!(g.accepts(None), "a token of a node without generations");
    }

    #[test]
    fn during_an_outage_a_node_accepts_only_what_it_issued_itself() {
        let g = single(Some(100), false);
        assert_eq!(g.for_challenge(), Some(7));
        assert!(g.accepts(Some(7)));
        assert!(
            !g.accepts(Some(100)),
            "spent through Redis maybe, elsewhere"
        );
        assert!(!g.accepts(None));
        let unknown = single(None, true);
        assert_eq!(unknown.for_challenge(), Some(7), "not known yet: our own");
        assert!(!unknown.accepts(Some(100)));
    }

    #[test]
    fn a_cluster_leaves_the_slot_generation_to_the_check_and_outages_are_the_same() {
        let up = Generations {
            redis: None,
            local: 7,
            redis_up: true,
            cluster: true,
        };
        assert_eq!(
            up.for_challenge(),
            Some(7),
            "no slot generation answered (a busy Redis): this node's"
        );
        assert!(up.accepts(None) && up.accepts(Some(7)));
        assert!(up.accepts(Some(8)), "a slot's: compared after the check");
        assert_eq!(up.spent_in(Some(8)), Some(8));
        assert_eq!(up.spent_in(Some(7)), None, "ours: the zone has its spend");
        let down = Generations {
            redis_up: false,
            ..up
        };
        assert_eq!(down.for_challenge(), Some(7));
        assert!(!down.accepts(None));
    }

    #[test]
    fn the_scripts_reply_is_read() {
        let value = b"d29e6ea7c0:123".to_vec();
        assert_eq!(
            from_reply(&OwnedFrame::BulkString(value.clone())),
            Some((value, 123))
        );
        assert_eq!(from_reply(&OwnedFrame::BulkString(b"x:y".to_vec())), None);
        assert_eq!(from_reply(&OwnedFrame::Null), None, "no key");
        assert!(is_stale(&[-1, 0, 0, 0]));
        assert!(!is_stale(&[1, 0, 0, 0]));
        let gen_spend = crate::cluster::scripts::Scripts::for_mode(false)
            .gen_spend
            .text;
        assert!(gen_spend.contains("KEYS[5]") && gen_spend.contains("ARGV[7]"));
    }

    #[test]
    fn every_slot_has_a_generation_key_in_it() {
        for slot in 0..SLOTS as u16 {
            let key = slot_key("pow:", slot);
            assert_eq!(
                crate::redis::cluster::key_slot(key.as_bytes()),
                slot,
                "{key}"
            );
        }
        // (Six digits at most: short names.)
        assert!(SLOT_TAGS.iter().all(|tag| (2..=7).contains(&tag[0])));
        // A client's keys and its slot's generation key share the slot.
        let tag = crate::redis::command::client_tag(b"203.0.113.7");
        let client = super::super::keys::client_prefix("pow:", b"203.0.113.7");
        let slot = slot_of_tag(tag.as_bytes());
        assert_eq!(crate::redis::cluster::key_slot(client.as_bytes()), slot);
        assert!(slot_key("pow:", slot).starts_with("pow:gen:{"));
    }

    #[test]
    fn each_slots_generation_key_is_named_by_the_smallest_number_in_it() {
        // The names every node has used: a node of another version finds
        // the same keys.
        let (mut first, mut left, mut n) = (vec![u32::MAX; SLOTS], SLOTS, 0u32);
        while left > 0 {
            let slot = usize::from(crc16(n.to_string().as_bytes())) % SLOTS;
            if first[slot] == u32::MAX {
                first[slot] = n;
                left -= 1;
            }
            n += 1;
        }
        for slot in 0..SLOTS as u16 {
            let expected = format!("pow:gen:{{{}}}", first[usize::from(slot)]);
            assert_eq!(slot_key("pow:", slot), expected);
        }
    }

    #[test]
    fn a_cluster_checks_reply_ends_with_the_slot_generation() {
        let reply = [1, 59, 60_000, 0, 0, 0, 0, 0, 0, 1_796_136_861_688_808];
        let split = |reply| crate::cluster::scripts::replies::split_generation(reply, true);
        assert_eq!(split(&reply), (&reply[..9], Some(1_796_136_861_688_808)));
        assert_eq!(split(&[1, 0]), (&[1][..], None), "admitted: none");
        assert_eq!(split(&[]), (&[][..], None));
        assert_eq!(stale_generation(&[-1, 0, 0, 0, 42]), Some(42));
        assert_eq!(stale_generation(&[-1, 0, 0, 0]), None, "one Redis's");
        let sharded = crate::cluster::scripts::Scripts::for_mode(true);
        for script in [
            sharded.window.text,
            sharded.approx.text,
            sharded.stacked.text,
        ] {
            assert!(script.contains("KEYS[#KEYS]") && script.ends_with("return reply\n"));
            assert!(
                script.contains("if refused then"),
                "read only for a refusal"
            );
        }
        assert!(sharded.gen_spend.text.contains("KEYS[5]"));
    }

    #[test]
    fn a_token_older_than_redis_s_generation_is_outdated_a_newer_one_is_news() {
        let g = Generations {
            redis: Some(100),
            local: 7,
            redis_up: true,
            cluster: false,
        };
        assert!(g.outdated(Some(99)));
        assert!(!g.outdated(Some(101)), "newer: being learnt");
        assert!(!g.outdated(Some(100)));
        assert!(!g.outdated(Some(7)), "this node's own outage generation");
        assert!(!g.outdated(None));
        assert!(!Generations {
            redis_up: false,
            ..g
        }
        .outdated(Some(99)));
    }
}

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
//!   atomically (`GEN_SPEND_SCRIPT`), so a spend recorded before a flush
//!   or a failover is never forgotten silently.
//! - While Redis is unavailable, a node issues and accepts only its own
//!   local generation: what its zone spent is all it knows.

use std::sync::LazyLock;

use redis_protocol::resp2::types::OwnedFrame;

use super::scripts::SPEND_SCRIPT;

/// Finds or renews the generation (KEYS[1] the gen key, ARGV[1] a fresh
/// random number, used if a new one is needed); returns the key's value,
/// `run_id:number` (a plain `GET` of it later tells whether it changed).
pub const GENERATION_SCRIPT: &str = r#"-- pow-shield data generation
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or ''
local v = redis.call('GET', KEYS[1])
if v then
  local at, gen = string.match(v, '^(%w*):(%d+)$')
  if at == run and gen then return v end
end
v = run .. ':' .. ARGV[1]
redis.call('SET', KEYS[1], v)
return v
"#;

/// The spend script, run only within the token's generation (KEYS[5] the
/// gen key, ARGV[7] the token's `gen`): otherwise `{-1, 0, 0, 0}` and
/// nothing is written.
pub static GEN_SPEND_SCRIPT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "-- pow-shield spend within the data generation\n\
         do\n  \
           local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or ''\n  \
           if redis.call('GET', KEYS[5]) ~= run .. ':' .. ARGV[7] then return {{-1, 0, 0, 0}} end\n\
         end\n{SPEND_SCRIPT}"
    )
});

/// Whether a generation spend's reply says the generation is gone.
pub fn is_stale(reply: &[i64]) -> bool {
    reply.first() == Some(&-1)
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
    /// Cluster, whose shards cannot share one atomically).
    pub redis: Option<u64>,
    /// This node's own, for challenges issued while Redis is unavailable.
    pub local: u64,
    /// Redis answers now.
    pub redis_up: bool,
    /// A Redis Cluster: no Redis generation; challenges issued while it
    /// answers carry none.
    pub cluster: bool,
}

impl Generations {
    /// The generation a challenge issued now carries.
    pub fn for_challenge(&self) -> Option<u64> {
        match (self.redis_up, self.redis) {
            (true, Some(gen)) => Some(gen),
            (true, None) if self.cluster => None,
            _ => Some(self.local),
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
            (Some(_), _) if self.cluster => false,
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
    fn a_cluster_has_no_redis_generation_but_outages_are_the_same() {
        let up = Generations {
            redis: None,
            local: 7,
            redis_up: true,
            cluster: true,
        };
        assert_eq!(up.for_challenge(), None);
        assert!(up.accepts(None) && up.accepts(Some(7)));
        assert!(!up.accepts(Some(8)));
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
        assert!(GEN_SPEND_SCRIPT.ends_with(SPEND_SCRIPT));
        assert!(GEN_SPEND_SCRIPT.contains("KEYS[5]") && GEN_SPEND_SCRIPT.contains("ARGV[7]"));
    }
}

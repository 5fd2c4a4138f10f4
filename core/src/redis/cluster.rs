//! Redis Cluster without the sockets (pure, unit-tested): which slot a key
//! hashes to, the slot map a `CLUSTER SLOTS` reply describes, the
//! redirections (`MOVED`, `ASK`, `TRYAGAIN`) a node may answer, and the
//! routing table that says which node serves a slot.

use core::fmt;

use redis_protocol::resp2::types::OwnedFrame;

/// Slots of a Redis Cluster.
pub const SLOTS: usize = 16_384;

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as the Redis
/// Cluster specification defines the key hash.
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of a key: CRC16 of its hash tag (the text between the first
/// `{` and the next `}`, if not empty), else of the whole key, mod 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(hashed) % SLOTS as u16
}

/// A node as the cluster announces it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeAddr {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl NodeAddr {
    /// `host:port` or `[v6]:port`, as in MOVED and ASK replies.
    pub fn parse(text: &str) -> Option<NodeAddr> {
        let (host, port) = text.rsplit_once(':')?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let port = port.parse::<u16>().ok().filter(|p| *p != 0)?;
        valid_host(host).then(|| NodeAddr {
            host: host.to_owned(),
            port,
        })
    }
}

/// What the cluster may announce as a node's address: an IP address or a
/// host name (never text that would break a log line).
fn valid_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
}

/// An error reply that sends the command elsewhere, or later.
#[derive(Debug, PartialEq, Eq)]
pub enum Redirect {
    /// `MOVED <slot> <node>`: the slot lives there now (refresh the map).
    Moved { slot: u16, node: NodeAddr },
    /// `ASK <slot> <node>`: this once, ask there (after `ASKING`).
    Ask { slot: u16, node: NodeAddr },
    /// `TRYAGAIN`: the slot is being migrated and the keys are split; the
    /// same command a little later succeeds.
    TryAgain,
}

/// Reads a redirection from an error reply's text.
pub fn parse_redirect(text: &str) -> Option<Redirect> {
    let mut words = text.split(' ');
    let kind = words.next()?;
    if kind == "TRYAGAIN" {
        return Some(Redirect::TryAgain);
    }
    let slot = words
        .next()?
        .parse::<u16>()
        .ok()
        .filter(|s| usize::from(*s) < SLOTS)?;
    let node = NodeAddr::parse(words.next()?)?;
    match kind {
        "MOVED" => Some(Redirect::Moved { slot, node }),
        "ASK" => Some(Redirect::Ask { slot, node }),
        _ => None,
    }
}

/// A range of slots and the master that serves it.
#[derive(Debug, PartialEq, Eq)]
pub struct SlotRange {
    pub first: u16,
    pub last: u16,
    pub master: NodeAddr,
}

/// Reads a `CLUSTER SLOTS` reply: `[[first, last, [host, port, id,
/// metadata], replicas...], ...]`. An empty host (a node that doesn't know
/// its own address) is `seen_from`, the node that answered; `?` (Redis 7
/// with `cluster-preferred-endpoint-type hostname`, for a node without a
/// hostname) is the `ip` of its metadata.
pub fn parse_slots(frame: &OwnedFrame, seen_from: &str) -> Result<Vec<SlotRange>, &'static str> {
    let OwnedFrame::Array(ranges) = frame else {
        return Err("CLUSTER SLOTS did not answer an array");
    };
    let mut out = Vec::with_capacity(ranges.len());
    // Slots the ranges cover together: more than exist means they overlap
    // (and bounds the work of writing them into the routes).
    let mut covered = 0usize;
    for range in ranges {
        let OwnedFrame::Array(parts) = range else {
            return Err("a slot range is not an array");
        };
        let (Some(first), Some(last), Some(OwnedFrame::Array(master))) = (
            slot_number(parts.first()),
            slot_number(parts.get(1)),
            parts.get(2),
        ) else {
            return Err("a slot range lacks its slots or its master");
        };
        if first > last {
            return Err("a slot range ends before it starts");
        }
        covered += usize::from(last - first) + 1;
        if covered > SLOTS {
            return Err("slot ranges overlap");
        }
        let host = match master.first() {
            Some(OwnedFrame::BulkString(b)) => core::str::from_utf8(b).ok(),
            Some(OwnedFrame::SimpleString(b)) => core::str::from_utf8(b).ok(),
            _ => None,
        }
        .ok_or("a master without a host")?;
        let host = match host {
            "" => seen_from,
            "?" => {
                metadata_ip(master.get(3)).ok_or("a master announced as \"?\" without its ip")?
            }
            host => host,
        };
        let port = match master.get(1) {
            Some(OwnedFrame::Integer(p)) => u16::try_from(*p).ok().filter(|p| *p != 0),
            _ => None,
        }
        .ok_or("a master without a valid port")?;
        if !valid_host(host) {
            return Err("a master with an invalid host");
        }
        out.push(SlotRange {
            first,
            last,
            master: NodeAddr {
                host: host.to_owned(),
                port,
            },
        });
    }
    Ok(out)
}

/// The `ip` of a node's metadata (`[key, value, ...]` since Redis 7).
fn metadata_ip(frame: Option<&OwnedFrame>) -> Option<&str> {
    let Some(OwnedFrame::Array(pairs)) = frame else {
        return None;
    };
    pairs.chunks_exact(2).find_map(|pair| match pair {
        [OwnedFrame::BulkString(k), OwnedFrame::BulkString(v)] if k.as_slice() == b"ip" => {
            core::str::from_utf8(v).ok()
        }
        _ => None,
    })
}

fn slot_number(frame: Option<&OwnedFrame>) -> Option<u16> {
    match frame {
        Some(OwnedFrame::Integer(n)) => u16::try_from(*n).ok().filter(|s| usize::from(*s) < SLOTS),
        _ => None,
    }
}

/// Which node serves each slot, as indexes into a list of nodes kept by
/// the caller (one connection each). Unknown slots go to any node, whose
/// `MOVED` then says where they live.
pub struct Routes {
    owner: Vec<Option<usize>>,
}

impl Default for Routes {
    fn default() -> Self {
        Routes {
            owner: vec![None; SLOTS],
        }
    }
}

impl Routes {
    /// The node serving `slot`, if known.
    pub fn owner(&self, slot: u16) -> Option<usize> {
        self.owner.get(usize::from(slot)).copied().flatten()
    }

    /// `slot` lives on `node` (a `MOVED`).
    pub fn set(&mut self, slot: u16, node: usize) {
        if let Some(owner) = self.owner.get_mut(usize::from(slot)) {
            *owner = Some(node);
        }
    }

    /// Replaces the whole map; `index` gives each master's node index.
    /// Returns whether anything changed.
    pub fn replace(
        &mut self,
        ranges: &[SlotRange],
        mut index: impl FnMut(&NodeAddr) -> usize,
    ) -> bool {
        let mut owner = vec![None; SLOTS];
        for range in ranges {
            let node = index(&range.master);
            for slot in range.first..=range.last {
                owner[usize::from(slot)] = Some(node);
            }
        }
        let changed = owner != self.owner;
        self.owner = owner;
        changed
    }
}

/// Nodes a cluster connection is kept to, by stable index (routes and
/// in-flight redirections hold indexes). Seeds stay for good; a node the
/// cluster announced is retired (its connection closed, never retried)
/// once the map no longer names it and it is down, or after
/// `RETIRE_AFTER_MAPS` maps without it: a node that moved (a pod's new
/// address) must not be reconnected every 2 s forever. A retired entry
/// comes back if the same address is announced again, and is reused for a
/// new address once `cap` entries exist.
pub struct Roster {
    entries: Vec<Entry>,
    cap: usize,
}

/// Maps read in a row without a node before it is retired although up.
pub const RETIRE_AFTER_MAPS: u32 = 3;

struct Entry {
    addr: NodeAddr,
    seed: bool,
    retired: bool,
    /// Maps read in a row that did not name it.
    absent: u32,
}

/// Where `Roster::place` puts an address.
#[derive(Debug, PartialEq, Eq)]
pub enum Place {
    /// Already has a live entry.
    Live(usize),
    /// Had one, retired: connect again at this index.
    Revive(usize),
    /// A new entry at the end (this index).
    New(usize),
    /// Replaces a retired entry of another address (this index).
    Reuse(usize),
    /// `cap` entries, none retired: not connected.
    Full,
}

impl Roster {
    pub fn new(cap: usize) -> Roster {
        Roster {
            entries: Vec::new(),
            cap,
        }
    }

    /// Adds a seed (kept for good); its index.
    pub fn add_seed(&mut self, addr: NodeAddr) -> usize {
        self.entries.push(Entry {
            addr,
            seed: true,
            retired: false,
            absent: 0,
        });
        self.entries.len() - 1
    }

    /// Where `addr` lives or would go (nothing changes until `placed`).
    pub fn place(&self, addr: &NodeAddr) -> Place {
        if let Some(i) = self.entries.iter().position(|e| e.addr == *addr) {
            return if self.entries[i].retired {
                Place::Revive(i)
            } else {
                Place::Live(i)
            };
        }
        if self.entries.len() < self.cap {
            return Place::New(self.entries.len());
        }
        match self.entries.iter().position(|e| e.retired) {
            Some(i) => Place::Reuse(i),
            None => Place::Full,
        }
    }

    /// `addr` was connected at `index` (a `Revive`, `New` or `Reuse`).
    pub fn placed(&mut self, index: usize, addr: &NodeAddr) {
        let entry = Entry {
            addr: addr.clone(),
            seed: false,
            retired: false,
            absent: 0,
        };
        match self.entries.get_mut(index) {
            Some(e) if e.addr == *addr => {
                e.retired = false;
                e.absent = 0;
            }
            Some(e) => *e = entry,
            None => self.entries.push(entry),
        }
    }

    /// A map was read: `named(i)` says whether it names entry `i` as a
    /// master, `down(i)` whether its connection is down. Returns the
    /// entries to retire now.
    pub fn on_map(
        &mut self,
        named: impl Fn(usize) -> bool,
        down: impl Fn(usize) -> bool,
    ) -> Vec<usize> {
        let mut retire = Vec::new();
        for (i, e) in self.entries.iter_mut().enumerate() {
            if named(i) {
                e.absent = 0;
                continue;
            }
            e.absent = e.absent.saturating_add(1);
            if !e.seed && !e.retired && (down(i) || e.absent >= RETIRE_AFTER_MAPS) {
                e.retired = true;
                retire.push(i);
            }
        }
        retire
    }

    #[cfg(test)]
    pub fn is_retired(&self, index: usize) -> bool {
        self.entries.get(index).is_some_and(|e| e.retired)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> NodeAddr {
        NodeAddr {
            host: "10.0.0.1".to_owned(),
            port,
        }
    }

    fn announced(r: &mut Roster, port: u16) -> usize {
        let i = match r.place(&addr(port)) {
            Place::New(i) | Place::Reuse(i) | Place::Revive(i) | Place::Live(i) => i,
            Place::Full => panic!("full"),
        };
        r.placed(i, &addr(port));
        i
    }

    #[test]
    fn a_node_absent_from_the_map_while_down_is_retired() {
        let mut r = Roster::new(64);
        let a = announced(&mut r, 1);
        let b = announced(&mut r, 2);
        assert_eq!(r.on_map(|i| i == a, |_| true), vec![b]);
        assert!(r.is_retired(b) && !r.is_retired(a));
        assert_eq!(r.on_map(|i| i == a, |_| true), Vec::<usize>::new(), "once");
    }

    #[test]
    fn a_node_absent_but_up_is_retired_after_a_few_maps() {
        let mut r = Roster::new(64);
        let a = announced(&mut r, 1);
        for _ in 1..RETIRE_AFTER_MAPS {
            assert!(r.on_map(|_| false, |_| false).is_empty());
        }
        assert_eq!(r.on_map(|_| false, |_| false), vec![a]);
    }

    #[test]
    fn a_map_naming_a_node_resets_its_absence() {
        let mut r = Roster::new(64);
        let a = announced(&mut r, 1);
        for _ in 1..RETIRE_AFTER_MAPS {
            r.on_map(|_| false, |_| false);
        }
        r.on_map(|_| true, |_| false);
        assert!(r.on_map(|_| false, |_| false).is_empty());
        assert!(!r.is_retired(a));
    }

    #[test]
    fn seeds_are_never_retired() {
        let mut r = Roster::new(64);
        let seed = r.add_seed(addr(1));
        for _ in 0..10 {
            assert!(r.on_map(|_| false, |_| true).is_empty());
        }
        assert_eq!(r.place(&addr(1)), Place::Live(seed));
    }

    #[test]
    fn a_retired_node_announced_again_keeps_its_index() {
        let mut r = Roster::new(64);
        let _seed = r.add_seed(addr(1));
        let b = announced(&mut r, 2);
        r.on_map(|i| i != b, |_| true);
        assert_eq!(r.place(&addr(2)), Place::Revive(b));
        assert_eq!(announced(&mut r, 2), b);
        assert!(!r.is_retired(b));
    }

    #[test]
    fn beyond_the_cap_a_retired_entry_is_reused_else_refused() {
        let mut r = Roster::new(2);
        let a = announced(&mut r, 1);
        let b = announced(&mut r, 2);
        assert_eq!(r.place(&addr(3)), Place::Full);
        r.on_map(|i| i == a, |i| i == b);
        assert_eq!(r.place(&addr(3)), Place::Reuse(b));
        assert_eq!(announced(&mut r, 3), b);
        assert_eq!(r.place(&addr(2)), Place::Full, "its old address is gone");
        assert_eq!(r.place(&addr(3)), Place::Live(b));
    }

    #[test]
    fn crc16_matches_the_cluster_spec_test_vector() {
        // Redis Cluster specification, appendix A: "123456789" -> 0x31C3.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn key_slots_match_redis() {
        // As CLUSTER KEYSLOT answers on Redis 7.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"123456789"), 0x31C3);
    }

    #[test]
    fn a_hash_tag_decides_the_slot() {
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{user1000}.followers"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"pow:{6162}:w:3:60000"), key_slot(b"6162"));
        assert_eq!(key_slot(b"pow:spent:{ab12}"), key_slot(b"ab12"));
    }

    #[test]
    fn only_the_first_non_empty_tag_counts() {
        // The spec's examples: "foo{}{bar}" hashes whole; "foo{{bar}}zap"
        // hashes "{bar"; "foo{bar}{zap}" hashes "bar".
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{bar"), crc16(b"foo{bar") % 16384);
    }

    fn node(host: &str, port: u16) -> NodeAddr {
        NodeAddr {
            host: host.to_owned(),
            port,
        }
    }

    #[test]
    fn moved_ask_and_tryagain_are_read() {
        assert_eq!(
            parse_redirect("MOVED 3999 127.0.0.1:6381"),
            Some(Redirect::Moved {
                slot: 3999,
                node: node("127.0.0.1", 6381)
            })
        );
        assert_eq!(
            parse_redirect("ASK 3999 [::1]:7000"),
            Some(Redirect::Ask {
                slot: 3999,
                node: node("::1", 7000)
            })
        );
        assert_eq!(
            parse_redirect("TRYAGAIN Multiple keys request during rehashing of slot"),
            Some(Redirect::TryAgain)
        );
    }

    #[test]
    fn other_errors_are_not_redirections() {
        for text in [
            "WRONGTYPE Operation against a key",
            "MOVED",
            "MOVED 16384 127.0.0.1:1",
            "MOVED x 127.0.0.1:1",
            "MOVED 1 127.0.0.1",
            "MOVED 1 127.0.0.1:0",
            "ASK 1 bad\nhost:1",
            "CLUSTERDOWN The cluster is down",
        ] {
            assert_eq!(parse_redirect(text), None, "{text}");
        }
    }

    fn bulk(s: &str) -> OwnedFrame {
        OwnedFrame::BulkString(s.as_bytes().to_vec())
    }

    fn range(first: i64, last: i64, host: &str, port: i64) -> OwnedFrame {
        OwnedFrame::Array(vec![
            OwnedFrame::Integer(first),
            OwnedFrame::Integer(last),
            OwnedFrame::Array(vec![bulk(host), OwnedFrame::Integer(port), bulk("id1")]),
            OwnedFrame::Array(vec![bulk(host), OwnedFrame::Integer(port + 1), bulk("id2")]),
        ])
    }

    #[test]
    fn a_cluster_slots_reply_gives_each_range_its_master() {
        let reply = OwnedFrame::Array(vec![
            range(0, 5460, "127.0.0.1", 7000),
            range(5461, 10922, "127.0.0.1", 7001),
            range(10923, 16383, "", 7002),
        ]);
        let ranges = parse_slots(&reply, "10.0.0.9").unwrap();
        assert_eq!(
            ranges,
            [
                SlotRange {
                    first: 0,
                    last: 5460,
                    master: node("127.0.0.1", 7000)
                },
                SlotRange {
                    first: 5461,
                    last: 10922,
                    master: node("127.0.0.1", 7001)
                },
                SlotRange {
                    first: 10923,
                    last: 16383,
                    master: node("10.0.0.9", 7002)
                },
            ]
        );
    }

    #[test]
    fn a_master_announced_as_a_question_mark_is_reached_at_its_metadata_ip() {
        // As Redis 7.0 answers with `cluster-preferred-endpoint-type
        // hostname` for a node that has no hostname.
        let master = |meta: Vec<OwnedFrame>| {
            OwnedFrame::Array(vec![OwnedFrame::Array(vec![
                OwnedFrame::Integer(0),
                OwnedFrame::Integer(16383),
                OwnedFrame::Array(vec![
                    bulk("?"),
                    OwnedFrame::Integer(30001),
                    bulk("id1"),
                    OwnedFrame::Array(meta),
                ]),
            ])])
        };
        let ranges = parse_slots(&master(vec![bulk("ip"), bulk("10.0.0.7")]), "x").unwrap();
        assert_eq!(ranges[0].master, node("10.0.0.7", 30001));
        assert!(parse_slots(&master(vec![bulk("hostname"), bulk("n1")]), "x").is_err());
        assert!(parse_slots(&master(vec![bulk("ip"), bulk("bad host")]), "x").is_err());
    }

    #[test]
    fn a_malformed_cluster_slots_reply_is_refused() {
        for reply in [
            OwnedFrame::Integer(1),
            OwnedFrame::Array(vec![OwnedFrame::Integer(1)]),
            OwnedFrame::Array(vec![range(10, 5, "h", 1)]),
            OwnedFrame::Array(vec![range(0, 16384, "h", 1)]),
            OwnedFrame::Array(vec![range(0, 1, "h", 0)]),
            OwnedFrame::Array(vec![range(0, 1, "h", 70000)]),
            OwnedFrame::Array(vec![range(0, 1, "bad host", 1)]),
            OwnedFrame::Array(vec![range(0, 16383, "h", 1), range(5, 5, "h", 2)]),
        ] {
            assert!(parse_slots(&reply, "x").is_err(), "{reply:?}");
        }
    }

    #[test]
    fn routes_follow_the_map_and_moved() {
        let ranges = [
            SlotRange {
                first: 0,
                last: 99,
                master: node("a", 1),
            },
            SlotRange {
                first: 100,
                last: 16383,
                master: node("b", 1),
            },
        ];
        let mut routes = Routes::default();
        assert_eq!(routes.owner(5), None, "unknown before the map");
        let index = |n: &NodeAddr| usize::from(n.host == "b");
        assert!(routes.replace(&ranges, index));
        assert_eq!((routes.owner(99), routes.owner(100)), (Some(0), Some(1)));
        assert!(!routes.replace(&ranges, index), "the same map: no change");
        routes.set(99, 1);
        assert_eq!(routes.owner(99), Some(1));
    }
}

//! Redis Cluster without the sockets (pure, unit-tested): which slot a key
//! hashes to, the slot map a `CLUSTER SLOTS` reply describes, the
//! redirections (`MOVED`, `ASK`, `TRYAGAIN`) a node may answer, and the
//! routing table that says which node serves a slot.

use core::fmt;

use redis_protocol::resp2::types::OwnedFrame;

mod crc16;
pub use crc16::crc16;

/// Slots of a Redis Cluster.
pub const SLOTS: usize = 16_384;

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

/// The slot of a route: a key (as [`key_slot`]), or a client's hash tag,
/// the inside of `<prefix>{...}`, which a `}` may end: a client whose keys
/// take its network's slot (`pow_shield_redis ... cluster slot=net`) has
/// the tag `@key=203.0.113.0/24}{@203.0.113.7`, its keys
/// `pow:{@key=203.0.113.0/24}{@203.0.113.7}:...`, and Redis hashes
/// `@key=203.0.113.0/24`. A route whose first brace closes is such a tag.
pub fn route_slot(route: &[u8]) -> u16 {
    // (One pass: hashed up to the first brace, every request's tag or two;
    // eight bytes a step while none is a brace, `crc16.rs`.)
    let (mut crc, rest) = crc16::words_to_brace(0, route);
    for &byte in rest {
        match byte {
            b'}' => break,
            b'{' => return key_slot(route),
            _ => crc = crc16::byte(crc, byte),
        }
    }
    crc % SLOTS as u16
}

/// Which slot a client's keys take in a Redis Cluster (`pow_shield_redis
/// ... cluster slot=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientSlot {
    /// Its own (`slot=client`, the default): clients spread over the
    /// slots one by one.
    #[default]
    Own,
    /// Its network's (`slot=net`): a client named by its address (the
    /// default key) keeps its keys in the slot of its `$pow_shield_net`'s
    /// counts, so that its own limit and a `key=$pow_shield_net` limit are
    /// checked in one call, as on one Redis. Every client of a /24 then
    /// shares one master, as the /24's limit already makes its requests do.
    Net,
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
///
/// One byte a slot (16 KB, where an `Option<usize>` a slot took 256 KB):
/// every call looks its slot up, and on a busy node the table competes
/// for the cache with Redis and the requests. An index from
/// [`Routes::MAX_NODE`] up is not kept: its slots stay unknown (sent to
/// any node, redirected by its `MOVED`); the module keeps far fewer nodes.
pub struct Routes {
    owner: Vec<u8>,
    /// A map was read or a `MOVED` followed.
    mapped: bool,
}

/// A slot no node is known for.
const UNKNOWN: u8 = u8::MAX;

impl Default for Routes {
    fn default() -> Self {
        Routes {
            owner: vec![UNKNOWN; SLOTS],
            mapped: false,
        }
    }
}

impl Routes {
    /// The first node index the table cannot hold.
    pub const MAX_NODE: usize = UNKNOWN as usize;

    /// The node serving `slot`, if known.
    pub fn owner(&self, slot: u16) -> Option<usize> {
        match self.owner.get(usize::from(slot)).copied() {
            Some(UNKNOWN) | None => None,
            Some(node) => Some(usize::from(node)),
        }
    }

    /// Whether a map was read or a `MOVED` followed (before, every slot
    /// goes to any node that is up).
    pub fn mapped(&self) -> bool {
        self.mapped
    }

    /// `slot` lives on `node` (a `MOVED`).
    pub fn set(&mut self, slot: u16, node: usize) {
        if let Some(owner) = self.owner.get_mut(usize::from(slot)) {
            *owner = Self::entry(node);
            self.mapped = true;
        }
    }

    /// Replaces the whole map; `index` gives each master's node index.
    /// Returns whether anything changed.
    pub fn replace(
        &mut self,
        ranges: &[SlotRange],
        mut index: impl FnMut(&NodeAddr) -> usize,
    ) -> bool {
        let mut owner = vec![UNKNOWN; SLOTS];
        for range in ranges {
            let node = Self::entry(index(&range.master));
            for slot in range.first..=range.last {
                owner[usize::from(slot)] = node;
            }
        }
        let changed = owner != self.owner;
        self.owner = owner;
        self.mapped = true;
        changed
    }

    /// What the table keeps for `node`.
    fn entry(node: usize) -> u8 {
        u8::try_from(node)
            .ok()
            .filter(|n| *n != UNKNOWN)
            .unwrap_or(UNKNOWN)
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

    /// Whether the entry at `index` is retired (closed for good; no route
    /// names it).
    pub fn is_retired(&self, index: usize) -> bool {
        self.entries.get(index).is_some_and(|e| e.retired)
    }
}

#[cfg(test)]
mod tests;

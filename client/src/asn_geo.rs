//! An IP-to-AS table in iptoasn.com's TSV format as an nginx `geo` include
//! (`pow-shield asn-geo`), so that a `geo` block gives a request its
//! autonomous system and `pow_shield_limit ... key=` can count per AS.
//!
//! A table line is `range_start<TAB>range_end<TAB>AS_number<TAB>country<TAB>description`
//! (only the first three columns are read), IPv4 or IPv6, AS 0 meaning
//! "not routed". Each range becomes the fewest CIDR networks that cover it
//! exactly, each with the value `AS<number>`: nginx's `geo` takes IPv4 and
//! IPv6 networks in one block, while its `ranges` mode reads IPv4 only.
//! Unrouted ranges are left out, so their addresses get the block's
//! `default`. Adjacent ranges of one AS are merged first (fewer networks).
//!
//! ```
//! use pow_shield_client::asn_geo::Converter;
//! let mut geo = Converter::default();
//! geo.add_line(1, "192.0.2.0\t192.0.2.255\t64496\tZZ\tEXAMPLE-NET").unwrap();
//! geo.add_line(2, "198.51.100.0\t198.51.100.255\t0\tNone\tNot routed").unwrap();
//! let lines: Vec<String> = geo.finish().iter().map(|e| e.to_string()).collect();
//! assert_eq!(lines, ["192.0.2.0/24 AS64496;"]);
//! ```

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What is wrong with one line of the table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// Fewer than three tab-separated columns.
    #[error(
        "expected range_start, range_end and AS_number separated by tabs, found {0} column(s)"
    )]
    Columns(usize),
    /// A column that should be an address is not one.
    #[error("{0:?} is not an IPv4 or IPv6 address")]
    Address(String),
    /// The AS number is not a number from 0 to 4294967295.
    #[error("{0:?} is not an AS number (0 to 4294967295)")]
    AsNumber(String),
    /// The range's ends are of different families.
    #[error("the range {0} - {1} mixes IPv4 and IPv6")]
    MixedFamilies(IpAddr, IpAddr),
    /// The range ends before it starts.
    #[error("the range {0} - {1} ends before it starts")]
    Reversed(IpAddr, IpAddr),
    /// The range starts at or before the end of an earlier range of its
    /// family: the table must be sorted and without overlaps (as
    /// iptoasn's is), or nginx would get one network twice.
    #[error("the range starting at {start} is not after the range of line {previous}: the table must be sorted, without overlaps")]
    Unsorted {
        /// Where the range starts.
        start: IpAddr,
        /// The line of the earlier range of its family.
        previous: usize,
    },
}

/// A table line that could not be read, with its line number (from 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {error}")]
pub struct ParseError {
    /// The line's number, from 1.
    pub line: usize,
    /// What is wrong with it.
    pub error: LineError,
}

/// An address family, with its addresses as numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// 32-bit addresses.
    V4,
    /// 128-bit addresses.
    V6,
}

impl Family {
    /// Address bits.
    pub fn bits(self) -> u8 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }

    fn address(self, n: u128) -> IpAddr {
        match self {
            // An IPv4 number is below 2^32 (ranges are read from IPv4 text).
            Family::V4 => IpAddr::V4(Ipv4Addr::from(n as u32)),
            Family::V6 => IpAddr::V6(Ipv6Addr::from(n)),
        }
    }
}

fn number(addr: IpAddr) -> (Family, u128) {
    match addr {
        IpAddr::V4(a) => (Family::V4, u128::from(u32::from(a))),
        IpAddr::V6(a) => (Family::V6, u128::from(a)),
    }
}

/// One line of the table: the addresses `start..=end` belong to `asn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsRange {
    /// Both ends' family.
    pub family: Family,
    /// The first address, as a number.
    pub start: u128,
    /// The last address, as a number.
    pub end: u128,
    /// The AS number; 0: not routed.
    pub asn: u32,
}

impl AsRange {
    /// Reads one table line: its first three tab-separated columns.
    pub fn parse(line: &str) -> Result<AsRange, LineError> {
        let columns: Vec<&str> = line.trim_end_matches('\r').split('\t').collect();
        if columns.len() < 3 {
            return Err(LineError::Columns(columns.len()));
        }
        let addr = |text: &str| {
            text.trim()
                .parse::<IpAddr>()
                .map_err(|_| LineError::Address(text.to_owned()))
        };
        let (first, last) = (addr(columns[0])?, addr(columns[1])?);
        let asn = columns[2]
            .trim()
            .parse::<u32>()
            .map_err(|_| LineError::AsNumber(columns[2].to_owned()))?;
        let ((family, start), (last_family, end)) = (number(first), number(last));
        if family != last_family {
            return Err(LineError::MixedFamilies(first, last));
        }
        if end < start {
            return Err(LineError::Reversed(first, last));
        }
        Ok(AsRange {
            family,
            start,
            end,
            asn,
        })
    }

    /// The fewest CIDR networks that cover exactly this range, in order.
    pub fn networks(&self) -> Vec<Network> {
        cidrs(self.family, self.start, self.end)
    }
}

/// A CIDR network: `address/prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    /// Its first address.
    pub address: IpAddr,
    /// Its prefix length.
    pub prefix: u8,
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix)
    }
}

/// The networks covering `start..=end` of one family (`start <= end`):
/// from `start`, each time the largest block aligned on it that does not
/// pass `end`.
pub fn cidrs(family: Family, start: u128, end: u128) -> Vec<Network> {
    let width = u32::from(family.bits());
    let mut out = Vec::new();
    let mut at = start;
    loop {
        // a block of 2^k addresses must start on a multiple of 2^k ...
        let mut k = at.trailing_zeros().min(width);
        // ... and end by `end`: its last address is at + (2^k - 1)
        while k > 0 && low_mask(k) > end - at {
            k -= 1;
        }
        out.push(Network {
            address: family.address(at),
            prefix: (width - k) as u8,
        });
        let last = at + low_mask(k);
        if last >= end {
            return out;
        }
        at = last + 1;
    }
}

/// 2^k - 1, for k up to 128.
fn low_mask(k: u32) -> u128 {
    if k >= 128 {
        u128::MAX
    } else {
        (1u128 << k) - 1
    }
}

/// One line of the `geo` include: a network and its AS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeoEntry {
    /// The network.
    pub network: Network,
    /// Its AS (never 0).
    pub asn: u32,
}

impl fmt::Display for GeoEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} AS{};", self.network, self.asn)
    }
}

/// Which families to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Keep {
    /// IPv4 and IPv6.
    #[default]
    Both,
    /// IPv4 only.
    V4,
    /// IPv6 only.
    V6,
}

impl Keep {
    fn keeps(self, family: Family) -> bool {
        matches!(
            (self, family),
            (Keep::Both, _) | (Keep::V4, Family::V4) | (Keep::V6, Family::V6)
        )
    }
}

/// The table read line by line into `geo` entries: checks each family's
/// order, merges adjacent ranges of one AS, leaves out AS 0.
#[derive(Debug, Default)]
pub struct Converter {
    keep: Keep,
    /// Per family (IPv4, IPv6): the end of the last range and its line.
    last: [Option<(u128, usize)>; 2],
    /// Per family: the range being extended.
    pending: [Option<AsRange>; 2],
    entries: Vec<GeoEntry>,
    ranges: usize,
    unrouted: usize,
}

impl Converter {
    /// A converter that keeps only the families `keep` says.
    pub fn new(keep: Keep) -> Converter {
        Converter {
            keep,
            ..Converter::default()
        }
    }

    /// Adds line number `line` (from 1) of the table; a blank line is
    /// skipped.
    pub fn add_line(&mut self, line: usize, text: &str) -> Result<(), ParseError> {
        if text.trim().is_empty() {
            return Ok(());
        }
        let range = AsRange::parse(text).map_err(|error| ParseError { line, error })?;
        let slot = usize::from(range.family == Family::V6);
        if let Some((end, previous)) = self.last[slot] {
            if range.start <= end {
                let start = range.family.address(range.start);
                let error = LineError::Unsorted { start, previous };
                return Err(ParseError { line, error });
            }
        }
        self.last[slot] = Some((range.end, line));
        self.ranges += 1;
        if range.asn == 0 {
            self.unrouted += 1;
        }
        if !self.keep.keeps(range.family) {
            return Ok(());
        }
        match &mut self.pending[slot] {
            Some(p) if p.asn == range.asn && range.start == p.end + 1 => p.end = range.end,
            pending => {
                if let Some(done) = pending.replace(range) {
                    push_entries(&mut self.entries, &done);
                }
            }
        }
        Ok(())
    }

    /// Ranges read (blank lines aside), and how many of them were AS 0.
    pub fn counts(&self) -> (usize, usize) {
        (self.ranges, self.unrouted)
    }

    /// The entries of the `geo` include, IPv4 then IPv6, each in order.
    pub fn finish(mut self) -> Vec<GeoEntry> {
        for slot in 0..2 {
            if let Some(done) = self.pending[slot].take() {
                push_entries(&mut self.entries, &done);
            }
        }
        // IPv4 first, as tables list them; within a family already sorted
        self.entries.sort_by_key(|e| e.network.address.is_ipv6());
        self.entries
    }
}

fn push_entries(entries: &mut Vec<GeoEntry>, range: &AsRange) {
    if range.asn == 0 {
        return;
    }
    entries.extend(range.networks().into_iter().map(|network| GeoEntry {
        network,
        asn: range.asn,
    }));
}

/// What the include's first line says of the `networks` written from the
/// `ranges` read, `unrouted` of them left out (`Converter::counts`):
/// `12 networks from 3 ranges; 1 unrouted (AS 0) left out`.
pub fn summary(networks: usize, (ranges, unrouted): (usize, usize)) -> String {
    format!(
        "{} from {}; {unrouted} unrouted (AS 0) left out",
        counted(networks, "network"),
        counted(ranges, "range"),
    )
}

/// `n` and `noun`, plural unless one: `1 network`, `2 networks`.
pub fn counted(n: usize, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}

#[cfg(test)]
#[path = "asn_geo/tests.rs"]
mod tests;

//! The default client identity, `$pow_shield_client`: who shares one limit;
//! and a client's network, `$pow_shield_net`.
//!
//! IPv4 clients are counted per address. IPv6 clients are counted per /64:
//! one subscriber is routinely handed a whole /64, so counting single
//! addresses would let anyone rotate addresses and never reach the limit.
//! An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, a dual-stack socket) is
//! the IPv4 client it stands for.

use core::fmt::{self, Write};
use std::net::{IpAddr, Ipv6Addr};

/// Longest text: a full IPv6 address (39 bytes); a /64 prefix needs 24.
const CAPACITY: usize = 40;

/// The identity text, kept on the stack (it is made once per request).
#[derive(Clone, Copy)]
pub struct ClientId {
    buf: [u8; CAPACITY],
    len: usize,
}

impl ClientId {
    pub fn as_str(&self) -> &str {
        // ok: `write_str` fills the buffer with whole `&str` pieces, `push`
        // and `push_octets` with ASCII.
        core::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    /// The text's bytes (ASCII), without `as_str`'s UTF-8 check.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl ClientId {
    /// Appends one ASCII byte; IPv4 text (16 bytes at most, a /24's
    /// included) always fits.
    fn push(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    /// Appends `octets` as IPv4 text writes them (`192.0.2`): digits by
    /// hand, not through `core::fmt` (measured: ~900 instructions a
    /// request for an address, ~1,500 for a /24 with `write!`).
    fn push_octets(&mut self, octets: &[u8]) {
        for (i, &octet) in octets.iter().enumerate() {
            if i > 0 {
                self.push(b'.');
            }
            if octet >= 100 {
                self.push(b'0' + octet / 100);
            }
            if octet >= 10 {
                self.push(b'0' + octet / 10 % 10);
            }
            self.push(b'0' + octet % 10);
        }
    }
}

impl fmt::Debug for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Write for ClientId {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len.checked_add(s.len()).ok_or(fmt::Error)?;
        let dst = self.buf.get_mut(self.len..end).ok_or(fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// What starts the default key (a NUL byte, then the peer's
/// [`client_id`]): no header value or `pow_shield_key` text does, so a
/// custom key never names an address's client (the module's
/// `config::DEFAULT_KEY` writes the same byte as `\0`).
pub const DEFAULT_KEY_MARK: u8 = 0;

/// What starts a `key=` value's own counts (`pow_shield_limit ... key=`),
/// in the zone and in Redis: the default key's NUL byte, then a letter no
/// [`client_id`] starts with (a digit, a hex digit, `:` or `u`). No
/// request can carry a NUL byte (nginx refuses it in a header, and
/// arguments and cookies are read undecoded), so no client key, default
/// or custom, shares a `key=` value's counts. (Its Redis tag is
/// `@key=<value>`.)
pub const OWN_KEY: &[u8] = b"\0key=";

/// The identity of a peer: `192.0.2.1` for IPv4, `2001:db8:1:2::/64` for
/// IPv6 (the /64 prefix, compressed as RFC 5952 writes it), and `unix:` for
/// a peer without an IP address (a UNIX-domain socket), as nginx's
/// `$remote_addr` names it; all such peers share one limit, like
/// `$binary_remote_addr` made them.
pub fn client_id(peer: Option<IpAddr>) -> ClientId {
    let mut id = ClientId {
        buf: [0; CAPACITY],
        len: 0,
    };
    // Every case fits CAPACITY, so the writes cannot fail.
    let _ = match peer.map(canonical) {
        // (Every request of the default key makes one.)
        Some(IpAddr::V4(v4)) => {
            id.push_octets(&v4.octets());
            Ok(())
        }
        Some(IpAddr::V6(v6)) => {
            let prefix = u128::from(v6) & !u128::from(u64::MAX);
            write!(id, "{}/64", Ipv6Addr::from(prefix))
        }
        None => id.write_str("unix:"),
    };
    id
}

/// The network of a peer, `$pow_shield_net` (for `pow_shield_limit ...
/// key=$pow_shield_net`): `192.0.2.0/24` for IPv4 (an IPv4-mapped IPv6
/// address as its IPv4), `2001:db8:1::/48` for IPv6 (the prefix a site is
/// routinely given), `unix:` for a peer without an IP address. A scraper
/// rotating through the addresses of a few networks counts in a few keys.
pub fn client_net(peer: Option<IpAddr>) -> ClientId {
    let mut id = ClientId {
        buf: [0; CAPACITY],
        len: 0,
    };
    // Every case fits CAPACITY, so the writes cannot fail.
    let _ = match peer.map(canonical) {
        // (Every request of a `key=$pow_shield_net` limit makes one.)
        Some(IpAddr::V4(v4)) => {
            let [a, b, c, _] = v4.octets();
            id.push_octets(&[a, b, c]);
            id.write_str(".0/24")
        }
        Some(IpAddr::V6(v6)) => {
            let prefix = u128::from(v6) & !(u128::MAX >> 48);
            write!(id, "{}/48", Ipv6Addr::from(prefix))
        }
        None => id.write_str("unix:"),
    };
    id
}

/// An IPv4-mapped IPv6 address as the IPv4 address it carries.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> String {
        client_id(Some(text.parse().expect("test address")))
            .as_str()
            .to_owned()
    }

    #[test]
    fn ipv4_is_the_address() {
        assert_eq!(id("192.0.2.1"), "192.0.2.1");
        assert_eq!(id("255.255.255.255"), "255.255.255.255");
    }

    #[test]
    fn ipv4_digits_are_written_as_display_writes_them() {
        for octet in [0u8, 1, 9, 10, 11, 99, 100, 101, 199, 200, 255] {
            for addr in [[octet, 0, 0, 0], [10, octet, 9, octet], [octet; 4]] {
                let v4 = std::net::Ipv4Addr::from(addr);
                assert_eq!(client_id(Some(IpAddr::V4(v4))).as_str(), v4.to_string());
            }
        }
    }

    #[test]
    fn ipv6_is_its_64_prefix() {
        assert_eq!(id("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "2001:db8:1:2::/64");
        assert_eq!(id("2001:db8:1:2::1"), "2001:db8:1:2::/64");
    }

    #[test]
    fn addresses_of_one_64_share_an_identity() {
        assert_eq!(
            id("2001:db8:0:7::1"),
            id("2001:db8:0:7:ffff:ffff:ffff:fffe")
        );
        assert_ne!(id("2001:db8:0:7::1"), id("2001:db8:0:8::1"));
    }

    #[test]
    fn ipv6_prefix_is_compressed() {
        assert_eq!(id("2001:db8::5"), "2001:db8::/64");
        assert_eq!(id("::1"), "::/64");
        assert_eq!(id("fe80::1:2:3:4"), "fe80::/64");
    }

    #[test]
    fn longest_ipv6_prefix_fits() {
        assert_eq!(
            id("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
            "ffff:ffff:ffff:ffff::/64"
        );
    }

    #[test]
    fn ipv4_mapped_ipv6_is_the_ipv4_address() {
        assert_eq!(id("::ffff:192.0.2.1"), "192.0.2.1");
        assert_eq!(id("::ffff:c000:201"), "192.0.2.1");
    }

    #[test]
    fn ipv4_compatible_ipv6_stays_ipv6() {
        // `::a.b.c.d` is deprecated and never made by dual-stack sockets.
        assert_eq!(id("::192.0.2.1"), "::/64");
    }

    fn net(text: &str) -> String {
        client_net(Some(text.parse().expect("test address")))
            .as_str()
            .to_owned()
    }

    #[test]
    fn the_network_of_ipv4_is_its_24() {
        assert_eq!(net("192.0.2.1"), "192.0.2.0/24");
        assert_eq!(net("192.0.2.255"), net("192.0.2.7"));
        assert_ne!(net("192.0.2.1"), net("192.0.3.1"));
        assert_eq!(net("255.255.255.255"), "255.255.255.0/24");
        assert_eq!(net("::ffff:192.0.2.9"), "192.0.2.0/24");
    }

    #[test]
    fn the_network_of_ipv4_is_written_as_display_writes_it() {
        for octet in [0u8, 1, 9, 10, 11, 99, 100, 101, 199, 200, 255] {
            for [a, b, c] in [[octet, 0, 0], [10, octet, 9], [octet; 3]] {
                let v4 = std::net::Ipv4Addr::new(a, b, c, octet);
                let want = format!("{a}.{b}.{c}.0/24");
                assert_eq!(client_net(Some(IpAddr::V4(v4))).as_str(), want);
            }
        }
    }

    #[test]
    fn the_network_of_ipv6_is_its_48() {
        assert_eq!(net("2001:db8:1:2::1"), "2001:db8:1::/48");
        assert_eq!(net("2001:db8:1:ffff:1::1"), net("2001:db8:1::5"));
        assert_ne!(net("2001:db8:1::1"), net("2001:db8:2::1"));
        assert_eq!(
            net("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
            "ffff:ffff:ffff::/48"
        );
        assert_eq!(net("::1"), "::/48");
        assert_eq!(client_net(None).as_str(), "unix:");
    }

    #[test]
    fn peer_without_address_is_unix() {
        assert_eq!(client_id(None).as_str(), "unix:");
    }
}

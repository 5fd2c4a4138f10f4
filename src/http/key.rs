//! The client key as the stores count it: `pow_shield_key` evaluated, or
//! the default key (`$pow_shield_client` after a mark) made without the
//! variable machinery, in the request pool or, on the straight path, as
//! its mark and the address text read where nginx keeps it (no copy); and
//! the peer's address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use nginx_sys::{ngx_connection_t, ngx_http_request_t};
use ngx::http::Request;

use crate::config::Policy;
use crate::ffi::bytes;
use pow_shield_core::limiter::client::{client_id, client_net, DEFAULT_KEY_MARK};

/// `policy`'s client key for `r`, evaluated now (request pool memory), as
/// the state keeps it.
pub(super) fn evaluate_key(r: &Request, policy: &Policy) -> Option<Pooled> {
    let key = if policy.default_key {
        default_key(r)?
    } else {
        // SAFETY: the key is a complex value compiled at configuration time.
        let cv = unsafe { policy.key.as_ref() }?;
        r.get_complex_value(cv)?.as_bytes()
    };
    Some((key.as_ptr(), key.len()))
}

/// Request pool bytes as the state keeps them (pointer, length): a
/// value made while the request lives.
pub(super) type Pooled = (*const u8, usize);

/// The bytes of a value the state keeps.
pub(super) fn pooled<'r>((data, len): Pooled) -> &'r [u8] {
    match len {
        0 => &[],
        // SAFETY: the value was made in the request's pool, which lives as
        // long as the request.
        len => unsafe { core::slice::from_raw_parts(data, len) },
    }
}

/// The default key (`config::DEFAULT_KEY`: a NUL byte, then
/// `$pow_shield_client`), made in the request pool without the variable
/// machinery: every request of a location with the default key needs it.
fn default_key(r: &Request) -> Option<&[u8]> {
    let raw: &ngx_http_request_t = r.as_ref();
    // SAFETY: a request's connection is live while the request is.
    let c = unsafe { &*raw.connection };
    // An IPv4 peer's identity is its address's text, which nginx wrote
    // already (and realip rewrites with the address): no formatting.
    // SAFETY: nginx filled the live connection's sockaddr.
    let made;
    let id = match unsafe { ipv4_text(c) } {
        Some(text) => text,
        None => {
            // SAFETY: as above.
            made = client_id(unsafe { peer_ip(c) });
            made.as_bytes()
        }
    };
    made_in_pool(r, id)
}

/// The default key whose IPv4 peer's address text was `(data, len)` when the
/// straight path counted it (`state::PassedKey::Address`), made in the
/// request pool as [`evaluate_key`] makes it.
pub(super) fn default_key_of(r: &Request, (data, len): Pooled) -> Option<Pooled> {
    // SAFETY: the text was `c->addr_text` of the request's connection: nginx
    // writes it in the connection's pool, and realip, when it rewrites the
    // address, makes new text in the same pool and keeps the old where it
    // is (`ngx_http_realip_set_addr`, its cleanup restoring the old): both
    // live as long as the connection, longer than the request.
    let id = unsafe { core::slice::from_raw_parts(data, len) };
    made_in_pool(r, id).map(|key| (key.as_ptr(), key.len()))
}

/// The default key of the peer identified by `id` (a NUL byte, then
/// `id`), made in the request pool.
fn made_in_pool<'r>(r: &'r Request, id: &[u8]) -> Option<&'r [u8]> {
    pooled_concat(r, &[DEFAULT_KEY_MARK], id)
}

/// `head` then `tail`, made in `r`'s pool (the keys a request makes for
/// itself: the default key, its network, a dry run's key); `None` when the
/// pool has no room.
pub(super) fn pooled_concat<'r>(r: &'r Request, head: &[u8], tail: &[u8]) -> Option<&'r [u8]> {
    let raw: &ngx_http_request_t = r.as_ref();
    let len = head.len() + tail.len();
    // SAFETY: `len` bytes of the request pool, which outlives `r`'s borrow
    // (the lifetime given), written in full before they are read.
    unsafe {
        let data = nginx_sys::ngx_pnalloc(raw.pool, len).cast::<u8>();
        if data.is_null() {
            return None;
        }
        core::ptr::copy_nonoverlapping(head.as_ptr(), data, head.len());
        core::ptr::copy_nonoverlapping(tail.as_ptr(), data.add(head.len()), tail.len());
        Some(core::slice::from_raw_parts(data, len))
    }
}

/// `$pow_shield_net` of `r` (`variables::get_net`'s bytes), made in the
/// request pool without the variable machinery: a limit's `key=` that is
/// this variable alone is read here on every request
/// (`request::evaluate_key_values`).
pub(super) fn net_key(r: &Request) -> Option<(*const u8, usize)> {
    let raw: &ngx_http_request_t = r.as_ref();
    // SAFETY: a request's connection is live while the request is.
    let c = unsafe { &*raw.connection };
    // An IPv4 peer's network is its address's text (nginx writes the four
    // octets in decimal, as `client_net` does; realip rewrites it with the
    // address) up to its last dot, then `0/24`: no formatting.
    // SAFETY: nginx filled the live connection's sockaddr.
    let made;
    let (head, tail): (&[u8], &[u8]) = match unsafe { ipv4_text(c) }
        .and_then(|text| text.get(..=text.iter().rposition(|b| *b == b'.')?))
    {
        Some(head) => (head, b"0/24"),
        None => {
            // SAFETY: as above.
            made = client_net(unsafe { peer_ip(c) });
            (made.as_bytes(), b"")
        }
    };
    pooled_concat(r, head, tail).map(|net| (net.as_ptr(), net.len()))
}

/// The default key of `r` as nginx keeps it (no copy): the IPv4 peer's
/// address text (`c->addr_text`'s bytes now, which [`default_key_of`]
/// makes the key of again), after the mark (`DEFAULT_KEY_MARK`, not
/// written: `store::StraightKey::Address`); `None` for any other peer (its
/// identity is made: [`evaluate_key`] makes it in the pool).
#[inline(always)]
pub(super) fn default_key_text(r: &Request) -> Option<&[u8]> {
    let raw: &ngx_http_request_t = r.as_ref();
    // SAFETY: a request's connection is live while the request is, and
    // nginx filled its sockaddr.
    unsafe { ipv4_text(&*raw.connection) }
}

/// `$remote_addr` of an IPv4 peer (after realip), which is its
/// `client_id` (nginx writes the four octets in decimal, as it does);
/// `None` for any other peer, or a connection without the text.
///
/// # Safety
/// `c` is a live connection whose `sockaddr` nginx filled.
#[inline(always)]
unsafe fn ipv4_text(c: &ngx_connection_t) -> Option<&[u8]> {
    // SAFETY: nginx's sockaddr is at least a `sockaddr` (checked non-null).
    let family = unsafe { c.sockaddr.as_ref() }.map(|sa| i32::from(sa.sa_family));
    let text = bytes(&c.addr_text);
    (family == Some(libc::AF_INET) && !text.is_empty()).then_some(text)
}

/// The peer's IP address (after realip), or `None` for UNIX-domain sockets
/// and other families.
///
/// # Safety
/// `c` is a live connection whose `sockaddr` nginx filled.
pub(super) unsafe fn peer_ip(c: &ngx_connection_t) -> Option<IpAddr> {
    if c.sockaddr.is_null() {
        return None;
    }
    // SAFETY: nginx's sockaddr is at least a `sockaddr`; the family says
    // which larger struct it is.
    unsafe {
        match i32::from((*c.sockaddr).sa_family) {
            libc::AF_INET => {
                let sin = &*c.sockaddr.cast::<libc::sockaddr_in>();
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))))
            }
            libc::AF_INET6 => {
                let sin6 = &*c.sockaddr.cast::<libc::sockaddr_in6>();
                Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
            }
            _ => None,
        }
    }
}

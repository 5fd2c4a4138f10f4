//! A socket address made at run time (a node a Redis Cluster announced, a
//! master a sentinel named), in memory of its own that nginx's connect
//! reads through an `ngx_addr_t`.

use core::ptr;
use std::net::SocketAddr;

use nginx_sys::{ngx_addr_t, ngx_str_t};

/// A socket address and its name for nginx's log lines.
pub(crate) struct OwnedAddr {
    sockaddr: Box<libc::sockaddr_storage>,
    name: Box<[u8]>,
}

impl OwnedAddr {
    pub(crate) fn new(addr: SocketAddr, name: &str) -> OwnedAddr {
        // SAFETY: an all-zero sockaddr_storage is a valid (unspecified) one.
        let mut storage: Box<libc::sockaddr_storage> = Box::new(unsafe { core::mem::zeroed() });
        let p: *mut libc::sockaddr_storage = &mut *storage;
        match addr {
            SocketAddr::V4(v4) => {
                let sin = p.cast::<libc::sockaddr_in>();
                // SAFETY: sockaddr_storage is large and aligned enough for
                // any socket address.
                unsafe {
                    (*sin).sin_family = libc::AF_INET as libc::sa_family_t;
                    (*sin).sin_port = v4.port().to_be();
                    (*sin).sin_addr.s_addr = u32::from(*v4.ip()).to_be();
                }
            }
            SocketAddr::V6(v6) => {
                let sin6 = p.cast::<libc::sockaddr_in6>();
                // SAFETY: as above.
                unsafe {
                    (*sin6).sin6_family = libc::AF_INET6 as libc::sa_family_t;
                    (*sin6).sin6_port = v6.port().to_be();
                    (*sin6).sin6_addr.s6_addr = v6.ip().octets();
                }
            }
        }
        OwnedAddr {
            sockaddr: storage,
            name: name.as_bytes().into(),
        }
    }

    /// An nginx address pointing into this one (valid while it lives).
    pub(crate) fn ngx_addr(&mut self) -> ngx_addr_t {
        self.ngx_addr_ref()
    }

    /// The same from a shared reference (nginx only reads through it).
    pub(crate) fn ngx_addr_ref(&self) -> ngx_addr_t {
        let socklen = match self.sockaddr.ss_family as i32 {
            libc::AF_INET6 => core::mem::size_of::<libc::sockaddr_in6>(),
            _ => core::mem::size_of::<libc::sockaddr_in>(),
        };
        ngx_addr_t {
            sockaddr: ptr::from_ref(&*self.sockaddr).cast_mut().cast(),
            socklen: socklen as libc::socklen_t,
            name: ngx_str_t {
                len: self.name.len(),
                data: self.name.as_ptr().cast_mut(),
            },
        }
    }
}

//! A connection's host name, resolved with nginx's asynchronous resolver
//! (the `resolver` directive) on the event loop: before the first connect,
//! again after the connection failed, and once its TTL ran out (in the
//! background while the connection serves; a new address that no longer
//! includes the connected one moves the connection). Never `getaddrinfo`
//! in a worker.
//!
//! nginx may call the handler from inside `ngx_resolve_name` (a cached
//! answer), while the client's state is borrowed: the handler only keeps
//! the answer and posts the reconnect event, which applies it.

use core::ffi::c_void;
use core::ptr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use nginx_sys::{ngx_msec_t, ngx_resolver_ctx_t, ngx_resolver_t, ngx_str_t, NGX_OK};

use super::addr::OwnedAddr;
use super::client::{Inner, State};
use super::connection::Phase;
use pow_shield_core::metrics::RedisError;

/// nginx's asynchronous resolver (the http block's `resolver`).
#[derive(Clone, Copy)]
pub struct NameResolver {
    pub resolver: *mut ngx_resolver_t,
    pub timeout_ms: ngx_msec_t,
}

impl NameResolver {
    /// What a connection to `host:port` resolves, if `host` is a name.
    pub fn for_host(resolver: Option<NameResolver>, host: &str, port: u16) -> Option<Resolve> {
        let r = resolver?;
        host.parse::<IpAddr>().is_err().then(|| Resolve {
            host: host.to_owned(),
            port,
            resolver: r.resolver,
            timeout_ms: r.timeout_ms,
        })
    }
}

/// A host name to resolve at run time.
pub struct Resolve {
    pub host: String,
    pub port: u16,
    pub resolver: *mut ngx_resolver_t,
    pub timeout_ms: ngx_msec_t,
}

/// The address in use and until when the answer holds.
pub(super) struct Resolved {
    pub(super) addr: OwnedAddr,
    pub(super) at: SocketAddr,
    /// nginx's seconds clock.
    valid_until: i64,
}

/// What the resolver answered (kept until the reconnect event runs).
pub(super) type Answer = Result<(Vec<SocketAddr>, i64), String>;

impl Resolved {
    fn expired(&self) -> bool {
        nginx_sys::ngx_time() as i64 >= self.valid_until
    }
}

impl Inner {
    /// Whether the name must be resolved before connecting.
    pub(super) fn needs_resolving(&self) -> bool {
        if self.settings.resolve.is_none() {
            return false;
        }
        let resolved = self.resolved.borrow();
        self.re_resolve.get() || resolved.as_ref().is_none_or(Resolved::expired)
    }

    /// While the connection serves: its answer ran out, ask again.
    pub(super) fn refresh_if_expired(&self, st: &mut State) {
        let expired = self
            .resolved
            .borrow()
            .as_ref()
            .is_some_and(Resolved::expired);
        if expired && self.resolve_ctx.get().is_null() {
            self.start_resolve(st, true);
        }
    }

    /// Starts resolving; `background`: the connection keeps serving.
    pub(super) fn start_resolve(&self, st: &mut State, background: bool) {
        let Some(r) = &self.settings.resolve else {
            return;
        };
        if !self.resolve_ctx.get().is_null() {
            if !background {
                st.phase = Phase::Resolving;
            }
            return;
        }
        // SAFETY: the resolver lives in the configuration's memory for the
        // worker's life; a NULL temp asks for a fresh context.
        let ctx = unsafe { nginx_sys::ngx_resolve_start(r.resolver, ptr::null_mut()) };
        // NGX_NO_RESOLVER is (void *) -1.
        if ctx.is_null() || ctx as usize == usize::MAX {
            self.fail(
                st,
                RedisError::Io,
                &format!("cannot resolve \"{}\"", r.host),
            );
            return;
        }
        // SAFETY: a context nginx just made for us; the name points into
        // our settings, which outlive it (shutdown ends it first).
        let rc = unsafe {
            (*ctx).name = ngx_str_t {
                len: r.host.len(),
                data: r.host.as_ptr().cast_mut(),
            };
            (*ctx).handler = Some(resolved_handler);
            (*ctx).data = ptr::from_ref(self).cast_mut().cast::<c_void>();
            (*ctx).timeout = r.timeout_ms;
            self.resolve_ctx.set(ctx);
            if !background {
                st.phase = Phase::Resolving;
            }
            nginx_sys::ngx_resolve_name(ctx)
        };
        if rc != NGX_OK as isize {
            // nginx freed the context.
            self.resolve_ctx.set(ptr::null_mut());
            if !background {
                st.phase = Phase::Disconnected;
            }
            self.fail(
                st,
                RedisError::Io,
                &format!("cannot resolve \"{}\"", r.host),
            );
        }
    }

    /// Applies the resolver's answer (from the reconnect event).
    pub(super) fn on_resolved(&self, st: &mut State, answer: Answer) {
        let Some(r) = &self.settings.resolve else {
            return;
        };
        let waiting = st.phase == Phase::Resolving;
        let (addrs, valid_until) = match answer {
            Ok(answer) => answer,
            Err(why) => {
                // A failed refresh keeps the connection and the address.
                if waiting {
                    self.unresolved(st, &format!("cannot resolve \"{}\": {why}", r.host));
                }
                return;
            }
        };
        self.re_resolve.set(false);
        let current = self.resolved.borrow().as_ref().map(|x| x.at);
        let kept = current.filter(|at| addrs.iter().any(|a| a.ip() == at.ip()));
        let Some(next) = kept.or_else(|| addrs.first().copied()) else {
            if waiting {
                self.unresolved(st, &format!("\"{}\" has no address", r.host));
            }
            return;
        };
        if let (Some(old), None) = (current, kept) {
            let next = SocketAddr::new(next.ip(), r.port);
            notice!(
                self.cycle_log,
                "pow_shield: redis {} now resolves to {next} (was {old})",
                self.settings.name
            );
        }
        let at = SocketAddr::new(next.ip(), r.port);
        if kept.is_some() && !waiting {
            // The same address: only the answer's lifetime is new.
            if let Some(resolved) = self.resolved.borrow_mut().as_mut() {
                resolved.valid_until = valid_until;
            }
            return;
        }
        *self.resolved.borrow_mut() = Some(Resolved {
            addr: OwnedAddr::new(at, &self.settings.name),
            at,
            valid_until,
        });
        if waiting {
            st.phase = Phase::Disconnected;
            self.connect_to(st);
        } else if kept.is_none() && st.phase != Phase::Disconnected {
            // The name moved while connected: to the new address now
            // (what waits is decided by pow_shield_fail).
            self.disconnect(st);
            self.connect_to(st);
        }
    }

    /// A connection waiting for its address got none: a failure.
    fn unresolved(&self, st: &mut State, why: &str) {
        st.phase = Phase::Disconnected;
        self.fail(st, RedisError::Io, why);
    }

    /// Ends a resolution in progress (worker exit, client dropped).
    pub(super) fn cancel_resolve(&self) {
        let ctx = self.resolve_ctx.replace(ptr::null_mut());
        if !ctx.is_null() {
            // SAFETY: our context, not yet answered; nginx frees it.
            unsafe { nginx_sys::ngx_resolve_name_done(ctx) };
        }
    }
}

/// nginx's resolver answered (or failed) for a client.
unsafe extern "C" fn resolved_handler(ctx: *mut ngx_resolver_ctx_t) {
    crate::ffi::guard((), || {
        // SAFETY: `data` is the client that started this context, alive
        // until it ends the context (cancel_resolve).
        let inner = unsafe { &*(*ctx).data.cast::<Inner>() };
        // SAFETY: the answer is valid until ngx_resolve_name_done.
        let answer = unsafe { read_answer(ctx) };
        // SAFETY: our context; done with it.
        unsafe { nginx_sys::ngx_resolve_name_done(ctx) };
        inner.resolve_ctx.set(ptr::null_mut());
        if let Ok(mut slot) = inner.resolution.try_borrow_mut() {
            *slot = Some(answer);
        }
        inner.post_reconnect();
    })
}

/// The addresses and expiry of an answer.
///
/// # Safety
/// `ctx` is a context in its handler, before `ngx_resolve_name_done`.
unsafe fn read_answer(ctx: *mut ngx_resolver_ctx_t) -> Answer {
    // SAFETY: per the contract.
    let ctx = unsafe { &*ctx };
    if ctx.state != 0 {
        // SAFETY: a static message for a resolver state.
        let why = unsafe { core::ffi::CStr::from_ptr(nginx_sys::ngx_resolver_strerror(ctx.state)) };
        return Err(why.to_string_lossy().into_owned());
    }
    let mut addrs = Vec::new();
    for i in 0..ctx.naddrs {
        // SAFETY: naddrs entries, each with a sockaddr of its family.
        let sa = unsafe { (*ctx.addrs.add(i)).sockaddr }.cast::<libc::sockaddr>();
        // SAFETY: as above.
        if let Some(addr) = unsafe { socket_addr(sa) } {
            addrs.push(addr);
        }
    }
    Ok((addrs, ctx.valid))
}

/// # Safety
/// `sa` points at a socket address of its `sa_family`.
unsafe fn socket_addr(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    // SAFETY: per the contract, read as the family says.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let sin = &*sa.cast::<libc::sockaddr_in>();
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                Some(SocketAddr::new(IpAddr::V4(ip), 0))
            }
            libc::AF_INET6 => {
                let sin6 = &*sa.cast::<libc::sockaddr_in6>();
                Some(SocketAddr::new(
                    IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                    0,
                ))
            }
            _ => None,
        }
    }
}

//! A connection's host name, resolved with nginx's asynchronous resolver
//! (the `resolver` directive) on the event loop: before the first connect,
//! again after the connection failed, and once its TTL ran out (in the
//! background while the connection serves; a new address that no longer
//! includes the connected one moves the connection). Never `getaddrinfo`
//! in a worker.
//!
//! nginx may call the handler from inside `ngx_resolve_name` (a cached
//! answer), while the connection's state is borrowed: the handler only
//! keeps the answer and posts the connection's wake event (its reconnect
//! event), whose handler applies it (`Names::apply` says what to do).

use core::cell::{Cell, RefCell};
use core::ffi::c_void;
use core::ptr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use nginx_sys::{ngx_log_t, ngx_msec_t, ngx_resolver_ctx_t, ngx_resolver_t, ngx_str_t, NGX_OK};

use super::addr::OwnedAddr;
use super::event::Event;

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
struct Resolved {
    addr: OwnedAddr,
    at: SocketAddr,
    /// nginx's seconds clock.
    valid_until: i64,
}

/// What the resolver answered (kept until the wake event runs).
pub(super) type Answer = Result<(Vec<SocketAddr>, i64), String>;

impl Resolved {
    fn expired(&self) -> bool {
        nginx_sys::ngx_time() as i64 >= self.valid_until
    }
}

/// What the connection does with an answer (`Names::apply`).
pub(super) enum Applied {
    /// Nothing: the address in use stays (with a new lifetime, or after a
    /// failed refresh).
    Unchanged,
    /// The connection waiting for its address got none: a failure.
    Failed(String),
    /// The connection waiting for its address may connect to it now.
    Connect,
    /// The name moved away from the address in use: connect again, there.
    Moved,
}

/// One connection's host name on nginx's resolver: the address in use,
/// the resolution in progress, its answer until applied, and whether a
/// failure asks for a new one. It lives as long as the connection and at
/// one address (nginx's resolver context points at it).
pub(super) struct Names {
    resolved: RefCell<Option<Resolved>>,
    ctx: Cell<*mut ngx_resolver_ctx_t>,
    answer: RefCell<Option<Answer>>,
    again: Cell<bool>,
    /// Posted once an answer is kept: its handler applies it.
    wake: Cell<*const Event>,
}

impl Names {
    pub(super) fn new() -> Names {
        Names {
            resolved: RefCell::new(None),
            ctx: Cell::new(ptr::null_mut()),
            answer: RefCell::new(None),
            again: Cell::new(false),
            wake: Cell::new(ptr::null()),
        }
    }

    /// The event to post when the resolver answers; `wake` lives as long
    /// as these names, at one address.
    pub(super) fn wake_with(&self, wake: &Event) {
        self.wake.set(wake);
    }

    /// Whether the name must be resolved before connecting.
    pub(super) fn needed(&self) -> bool {
        self.again.get()
            || self
                .resolved
                .borrow()
                .as_ref()
                .is_none_or(Resolved::expired)
    }

    /// While the connection serves: its answer ran out and no resolution
    /// is in progress.
    pub(super) fn refresh_due(&self) -> bool {
        let expired = self
            .resolved
            .borrow()
            .as_ref()
            .is_some_and(Resolved::expired);
        expired && self.ctx.get().is_null()
    }

    /// A failure: the name is asked again before the next attempt (the
    /// address may have moved).
    pub(super) fn ask_again(&self) {
        self.again.set(true);
    }

    /// The address to connect to, once resolved (valid while it is in
    /// use: it is replaced only once its connection is closed).
    pub(super) fn addr(&self) -> Option<nginx_sys::ngx_addr_t> {
        self.resolved
            .borrow()
            .as_ref()
            .map(|r| r.addr.ngx_addr_ref())
    }

    /// Starts resolving `r` (nothing if a resolution is in progress). The
    /// answer may come at once, from nginx's cache: it is only kept then.
    pub(super) fn start(&self, r: &Resolve) -> Result<(), String> {
        if !self.ctx.get().is_null() {
            return Ok(());
        }
        let refused = || format!("cannot resolve \"{}\"", r.host);
        // SAFETY: the resolver lives in the configuration's memory for the
        // worker's life; a NULL temp asks for a fresh context.
        let ctx = unsafe { nginx_sys::ngx_resolve_start(r.resolver, ptr::null_mut()) };
        // NGX_NO_RESOLVER is (void *) -1.
        if ctx.is_null() || ctx as usize == usize::MAX {
            return Err(refused());
        }
        // SAFETY: a context nginx just made for us; the name points into
        // the connection's settings, which outlive it (shutdown ends it
        // first), and `data` at these names, which do too.
        let rc = unsafe {
            (*ctx).name = ngx_str_t {
                len: r.host.len(),
                data: r.host.as_ptr().cast_mut(),
            };
            (*ctx).handler = Some(resolved_handler);
            (*ctx).data = ptr::from_ref(self).cast_mut().cast::<c_void>();
            (*ctx).timeout = r.timeout_ms;
            // Its timeout timer does not hold a worker that exits (no
            // request waits for a name: `pow_shield_fail` decides them);
            // `exit_process` ends the lookup.
            (*ctx).set_cancelable(1);
            self.ctx.set(ctx);
            nginx_sys::ngx_resolve_name(ctx)
        };
        if rc != NGX_OK as isize {
            // nginx freed the context.
            self.ctx.set(ptr::null_mut());
            return Err(refused());
        }
        Ok(())
    }

    /// The answer the resolver gave, once.
    pub(super) fn take_answer(&self) -> Option<Answer> {
        self.answer.try_borrow_mut().ok().and_then(|mut a| a.take())
    }

    /// Keeps the resolver's answer for `r`; `waiting`: the connection
    /// waits for it (else it serves, and this was a refresh). An address
    /// that still includes the one in use keeps it.
    pub(super) fn apply(
        &self,
        r: &Resolve,
        name: &str,
        log: *mut ngx_log_t,
        answer: Answer,
        waiting: bool,
    ) -> Applied {
        let (addrs, valid_until) = match answer {
            Ok(answer) => answer,
            // A failed refresh keeps the connection and the address.
            Err(why) if waiting => {
                return Applied::Failed(format!("cannot resolve \"{}\": {why}", r.host))
            }
            Err(_) => return Applied::Unchanged,
        };
        self.again.set(false);
        let current = self.resolved.borrow().as_ref().map(|x| x.at);
        let kept = current.filter(|at| addrs.iter().any(|a| a.ip() == at.ip()));
        let Some(next) = kept.or_else(|| addrs.first().copied()) else {
            if waiting {
                return Applied::Failed(format!("\"{}\" has no address", r.host));
            }
            return Applied::Unchanged;
        };
        if let (Some(old), None) = (current, kept) {
            let next = SocketAddr::new(next.ip(), r.port);
            notice!(
                log,
                "pow_shield: redis {name} now resolves to {next} (was {old})"
            );
        }
        let at = SocketAddr::new(next.ip(), r.port);
        if kept.is_some() && !waiting {
            // The same address: only the answer's lifetime is new.
            if let Some(resolved) = self.resolved.borrow_mut().as_mut() {
                resolved.valid_until = valid_until;
            }
            return Applied::Unchanged;
        }
        *self.resolved.borrow_mut() = Some(Resolved {
            addr: OwnedAddr::new(at, name),
            at,
            valid_until,
        });
        if waiting {
            Applied::Connect
        } else if kept.is_none() {
            Applied::Moved
        } else {
            Applied::Unchanged
        }
    }

    /// Ends a resolution in progress (worker exit, connection dropped).
    pub(super) fn cancel(&self) {
        let ctx = self.ctx.replace(ptr::null_mut());
        if !ctx.is_null() {
            // SAFETY: our context, not yet answered; nginx frees it.
            unsafe { nginx_sys::ngx_resolve_name_done(ctx) };
        }
    }
}

/// nginx's resolver answered (or failed) for a connection's names.
unsafe extern "C" fn resolved_handler(ctx: *mut ngx_resolver_ctx_t) {
    crate::ffi::guard((), || {
        // SAFETY: `data` is the names that started this context, alive
        // until they end the context (`Names::cancel`).
        let names = unsafe { &*(*ctx).data.cast::<Names>() };
        // SAFETY: the answer is valid until ngx_resolve_name_done.
        let answer = unsafe { read_answer(ctx) };
        // SAFETY: our context; done with it.
        unsafe { nginx_sys::ngx_resolve_name_done(ctx) };
        names.ctx.set(ptr::null_mut());
        if let Ok(mut slot) = names.answer.try_borrow_mut() {
            *slot = Some(answer);
        }
        let wake = names.wake.get();
        if !wake.is_null() {
            // SAFETY: set by `wake_with` to an event that lives as long as
            // these names.
            unsafe { (*wake).post() };
        }
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

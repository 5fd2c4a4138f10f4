//! TLS for `rediss://` with nginx's own OpenSSL: the context is built once
//! from the configuration (CA, client certificate), and each connection
//! does its handshake on the event loop like nginx's upstreams do —
//! `ngx_ssl_handshake` never blocks; the chain and the name are checked
//! once it completes (nginx's verify callback lets every handshake finish).

use core::ffi::{c_int, c_long, CStr};
use core::ptr;
use std::ffi::CString;

use nginx_sys::{
    ngx_conf_t, ngx_connection_t, ngx_int_t, ngx_ssl_t, ngx_str_t, NGX_SSL_TLSv1_2,
    NGX_SSL_TLSv1_3, NGX_OK, NGX_SSL_CLIENT,
};

/// Certificates between Redis's and a trusted CA (nginx's default for
/// upstreams is 1; managed services often use an intermediate).
const VERIFY_DEPTH: ngx_int_t = 4;

/// Files of a `rediss://` configuration, as full paths.
pub struct Files<'a> {
    /// CA certificates to verify Redis with; `None`: no verification.
    pub ca: Option<&'a str>,
    /// Client certificate and key (mutual TLS).
    pub cert: Option<(&'a str, &'a str)>,
}

/// OpenSSL's compiled-in default CA file (Debian: `/usr/lib/ssl/cert.pem`,
/// the system bundle), used when `tls_verify` is on without `tls_ca=`.
pub fn default_ca_file() -> Option<String> {
    // SAFETY: OpenSSL returns a static NUL-terminated string (or null).
    let p = unsafe { nginx_sys::X509_get_default_cert_file() };
    if p.is_null() {
        return None;
    }
    // SAFETY: as above.
    let text = unsafe { CStr::from_ptr(p) };
    text.to_str().ok().map(str::to_owned)
}

/// Builds the TLS context in the configuration pool (freed with it).
/// OpenSSL's own reason is logged by nginx; the error says what failed.
pub fn context(cf: &mut ngx_conf_t, files: &Files) -> Result<*mut ngx_ssl_t, String> {
    // SAFETY: a zeroed ngx_ssl_t from the configuration pool is what
    // nginx's modules pass to ngx_ssl_create; the cleanup frees the
    // OpenSSL context with the pool, after every worker is done with it.
    unsafe {
        let ssl =
            nginx_sys::ngx_pcalloc(cf.pool, core::mem::size_of::<ngx_ssl_t>()).cast::<ngx_ssl_t>();
        if ssl.is_null() {
            return Err("out of memory".to_owned());
        }
        (*ssl).log = cf.log;
        let protocols = (NGX_SSL_TLSv1_2 | NGX_SSL_TLSv1_3) as usize;
        if nginx_sys::ngx_ssl_create(ssl, protocols, ptr::null_mut()) != NGX_OK as ngx_int_t {
            return Err("cannot create the TLS context".to_owned());
        }
        let cln = nginx_sys::ngx_pool_cleanup_add(cf.pool, 0);
        if cln.is_null() {
            nginx_sys::ngx_ssl_cleanup_ctx(ssl.cast());
            return Err("out of memory".to_owned());
        }
        (*cln).handler = Some(nginx_sys::ngx_ssl_cleanup_ctx);
        (*cln).data = ssl.cast();
        // A write that met EAGAIN is retried from the client's output buffer,
        // which may have grown (and moved) meanwhile; without this mode
        // OpenSSL fails the retry ("bad write retry"). nginx does not set it.
        // SSL_CTX_set_mode is a macro over SSL_CTX_ctrl.
        nginx_sys::SSL_CTX_ctrl(
            (*ssl).ctx,
            nginx_sys::SSL_CTRL_MODE as c_int,
            nginx_sys::SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER as c_long,
            ptr::null_mut(),
        );

        if let Some((cert, key)) = files.cert {
            let mut cert = pool_str(cf, cert)?;
            let mut key = pool_str(cf, key)?;
            let rc = nginx_sys::ngx_ssl_certificate(cf, ssl, &mut cert, &mut key, ptr::null_mut());
            if rc != NGX_OK as ngx_int_t {
                return Err("cannot load the client certificate or key".to_owned());
            }
        }
        if let Some(ca) = files.ca {
            let mut ca = pool_str(cf, ca)?;
            if nginx_sys::ngx_ssl_trusted_certificate(cf, ssl, &mut ca, VERIFY_DEPTH)
                != NGX_OK as ngx_int_t
            {
                return Err("cannot load the CA certificates".to_owned());
            }
        }
        Ok(ssl)
    }
}

fn pool_str(cf: &mut ngx_conf_t, s: &str) -> Result<ngx_str_t, String> {
    // nginx's certificate loaders want NUL-terminated strings.
    let mut bytes = s.as_bytes().to_vec();
    bytes.push(0);
    // SAFETY: copies into the configuration pool.
    let mut out = unsafe { ngx_str_t::from_bytes(cf.pool, &bytes) }.ok_or("out of memory")?;
    out.len -= 1;
    Ok(out)
}

/// The name a connection checks and sends, ready for OpenSSL.
pub struct PeerName {
    /// NUL-terminated, for SNI.
    c: CString,
    /// An address rather than a host name: checked, but no SNI (RFC 6066).
    is_address: bool,
}

impl PeerName {
    pub fn new(name: &str) -> Option<Self> {
        Some(PeerName {
            c: CString::new(name).ok()?,
            is_address: name.parse::<std::net::IpAddr>().is_ok(),
        })
    }

    pub fn as_str(&self) -> &str {
        self.c.to_str().unwrap_or("")
    }
}

/// Starts TLS on a connected socket: creates the SSL object (in a pool of
/// the connection's own, which `close` destroys) and sets SNI.
///
/// # Safety
/// `c` is an open connection from `ngx_event_connect_peer`, without a pool.
pub unsafe fn attach(
    c: *mut ngx_connection_t,
    ssl: *mut ngx_ssl_t,
    name: &PeerName,
) -> Result<(), String> {
    // SAFETY: per the contract; the pool lives until `close`.
    unsafe {
        (*c).pool = nginx_sys::ngx_create_pool(1024, (*c).log);
        if (*c).pool.is_null() {
            return Err("out of memory".to_owned());
        }
        if nginx_sys::ngx_ssl_create_connection(ssl, c, NGX_SSL_CLIENT as usize)
            != NGX_OK as ngx_int_t
        {
            return Err("cannot create the TLS connection".to_owned());
        }
        if !name.is_address {
            let conn = (*(*c).ssl).connection;
            // SSL_set_tlsext_host_name is a macro over SSL_ctrl.
            let rc = nginx_sys::SSL_ctrl(
                conn,
                nginx_sys::SSL_CTRL_SET_TLSEXT_HOSTNAME as c_int,
                nginx_sys::TLSEXT_NAMETYPE_host_name as c_long,
                name.c.as_ptr().cast_mut().cast(),
            );
            if rc != 1 {
                return Err("cannot set the server name (SNI)".to_owned());
            }
        }
    }
    Ok(())
}

/// After a completed handshake: the chain verified to a trusted CA, and
/// the certificate issued to `name`.
///
/// # Safety
/// `c` is a connection whose TLS handshake completed.
pub unsafe fn verify(c: *mut ngx_connection_t, name: &PeerName) -> Result<(), String> {
    // SAFETY: per the contract, c->ssl is set and holds the SSL object.
    unsafe {
        let conn = (*(*c).ssl).connection;
        let rc = nginx_sys::SSL_get_verify_result(conn);
        if rc != nginx_sys::X509_V_OK as c_long {
            let why = nginx_sys::X509_verify_cert_error_string(rc);
            let why = if why.is_null() {
                "unknown".into()
            } else {
                CStr::from_ptr(why).to_string_lossy()
            };
            return Err(format!("certificate verify failed: ({rc}: {why})"));
        }
        let matches = if name.is_address {
            // nginx's check (X509_check_host) reads DNS names only: an
            // address must be among the certificate's IP addresses.
            let cert = nginx_sys::SSL_get0_peer_certificate(conn);
            !cert.is_null() && nginx_sys::X509_check_ip_asc(cert, name.c.as_ptr(), 0) == 1
        } else {
            let mut checked = ngx_str_t {
                len: name.c.as_bytes().len(),
                data: name.c.as_ptr().cast_mut().cast(),
            };
            nginx_sys::ngx_ssl_check_host(c, &mut checked) == NGX_OK as ngx_int_t
        };
        if !matches {
            return Err(format!("certificate does not match \"{}\"", name.as_str()));
        }
    }
    Ok(())
}

/// Frees the TLS state of a connection about to be closed, without
/// waiting for Redis (no close_notify exchange: we close either way).
///
/// # Safety
/// `c` is our connection, about to be closed with `ngx_close_connection`.
pub unsafe fn detach(c: *mut ngx_connection_t) {
    // SAFETY: per the contract.
    unsafe {
        if !(*c).ssl.is_null() {
            (*(*c).ssl).set_no_wait_shutdown(1);
            (*(*c).ssl).set_no_send_shutdown(1);
            // With both flags set it completes at once and frees the SSL.
            let _ = nginx_sys::ngx_ssl_shutdown(c);
        }
    }
}

/// Destroys the pool `attach` created, once the connection is closed.
///
/// # Safety
/// `pool` is null or the pool `attach` created, no longer used.
pub unsafe fn free_pool(pool: *mut nginx_sys::ngx_pool_t) {
    if !pool.is_null() {
        // SAFETY: per the contract.
        unsafe { nginx_sys::ngx_destroy_pool(pool) };
    }
}

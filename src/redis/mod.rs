//! The Redis client's socket on nginx's event loop (its pure parts are in
//! `pow_shield_core::redis`). One node's client: submission and reply
//! dispatch in `client`, its socket in `connection`, what nginx calls in
//! `events`, TLS from nginx's OpenSSL in `tls`. `router` sends each command
//! to the one Redis, through `sentinel` to the master Sentinel names, or
//! through `cluster` to its slot's master in a Redis Cluster.

mod addr;
pub mod client;
mod cluster;
mod connection;
mod events;
pub mod resolve;
pub mod router;
mod sentinel;
pub mod tls;

/// nginx's cached monotonic millisecond clock.
fn now() -> nginx_sys::ngx_msec_t {
    // SAFETY: updated by this (single-threaded) worker's event loop only;
    // a plain read.
    unsafe { nginx_sys::ngx_current_msec }
}

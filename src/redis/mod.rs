//! The Redis client on nginx's event loop (its pure parts are in
//! `pow_shield_core::redis`). One node's client, top to bottom: `client`
//! (what requests and routers see), `connection` (its life on the event
//! loop and every function nginx calls for it), and below it `exchange`
//! (commands, replies, health), `link` (the socket), `resolve` (a host
//! name on nginx's resolver), `tls` (nginx's OpenSSL), `settings`, `event`,
//! `addr`. `router` sends each command to the one Redis, through
//! `sentinel` to the master Sentinel names, or through `cluster` to its
//! slot's master in a Redis Cluster.

mod addr;
pub mod client;
mod cluster;
mod connection;
mod event;
mod exchange;
mod link;
pub mod resolve;
pub mod router;
mod sentinel;
mod settings;
pub mod tls;

/// nginx's cached monotonic millisecond clock.
fn now() -> nginx_sys::ngx_msec_t {
    // SAFETY: updated by this (single-threaded) worker's event loop only;
    // a plain read.
    unsafe { nginx_sys::ngx_current_msec }
}

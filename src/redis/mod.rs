//! The Redis client's socket on nginx's event loop (its pure parts are in
//! `pow_shield_core::redis`): the connection and its events in `client`,
//! with TLS from nginx's OpenSSL in `tls`; `router` sends each command to
//! its slot's master in a Redis Cluster.

#[cfg(not(test))]
pub mod client;
#[cfg(not(test))]
pub mod router;
#[cfg(not(test))]
pub mod tls;

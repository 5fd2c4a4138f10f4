//! The Redis client on nginx's event loop, by concern: the URL and options
//! of `pow_shield_redis` in `url` (pure); RESP2 framing in `command` (pure);
//! one script call encoded in place in `script_call` (pure); slots, the
//! cluster map and redirections in `cluster` (pure), followed by `router`,
//! which sends each command to its slot's master; what flows over a
//! connection (reply matching, NOSCRIPT, the handshake) in `pipeline`
//! (pure); the socket and its events in `client`, with TLS from nginx's
//! OpenSSL in `tls`; what it logs, refuses and when it retries in `health`
//! (pure); spends to write after an outage in `replays` (pure).

#[cfg(not(test))]
pub mod client;
pub mod cluster;
pub mod command;
pub mod health;
pub mod pipeline;
pub mod replays;
#[cfg(not(test))]
pub mod router;
pub mod script_call;
#[cfg(not(test))]
pub mod tls;
pub mod url;

//! The Redis client on nginx's event loop: RESP2 framing in `command`
//! (pure), the connection and pipelining in `client`.

#[cfg(not(test))]
pub mod client;
pub mod command;

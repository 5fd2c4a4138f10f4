//! The Redis client on nginx's event loop: RESP2 framing in `command`
//! (pure), the connection and pipelining in `client`, what it logs and
//! refuses in `health` (pure), spends to write after an outage in `replays`
//! (pure), one script call encoded in place in `script_call` (pure).

#[cfg(not(test))]
pub mod client;
pub mod command;
pub mod health;
pub mod replays;
pub mod script_call;

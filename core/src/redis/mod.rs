//! The Redis client's pure parts (the socket and its events are the
//! module's `redis/`): the URL and options of `pow_shield_redis` in `url`;
//! RESP2 framing in `command`; one script call encoded in place in
//! `script_call`; slots, the cluster map and redirections in `cluster`;
//! Redis's clock and the deadline a call carries in `clock`;
//! what flows over a connection (reply matching, NOSCRIPT, the handshake)
//! in `pipeline`; what it logs, refuses and when it retries in `health`;
//! what Sentinel answers in `sentinel`. (What cluster mode sends over it,
//! and the scripts, are `cluster`'s.)

pub mod clock;
pub mod cluster;
pub mod command;
pub mod deadline;
pub mod health;
pub mod pipeline;
pub mod retries;
pub mod script_call;
pub mod sentinel;
pub mod url;

/// Why Redis's word cannot be had for a call: the one "unavailable" of
/// cluster mode, from the connection that refuses a command to the rule
/// that decides the request (`cluster::fallback`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// Not connected, in back-off, timed out, the reply lost, or the
    /// worker exits: `pow_shield_fail` decides.
    Down,
    /// Connected, but `MAX_IN_FLIGHT` commands wait already:
    /// back-pressure, not an outage. The request is decided by the zone,
    /// never passed uncounted.
    Busy,
}

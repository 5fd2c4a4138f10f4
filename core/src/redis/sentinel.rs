//! What Redis Sentinel answers, read without a socket (pure, unit-tested):
//! `SENTINEL get-master-addr-by-name`, `ROLE`, and the `+switch-master`
//! notices of a subscription; when to ask again (docs/operations.md,
//! "Redis Sentinel").

use redis_protocol::resp2::types::OwnedFrame;

use super::cluster::NodeAddr;

/// The channel whose messages announce a failover.
pub const SWITCH_CHANNEL: &str = "+switch-master";

/// Asking the sentinels again while the master is down or unknown: first
/// wait and the ceiling it doubles up to (the sentinels' own failover takes
/// seconds: `down-after-milliseconds` plus the election).
pub const ASK_FIRST_MS: u64 = 100;
pub const ASK_MAX_MS: u64 = 2_000;
/// While the master answers: how often the sentinels are asked anyway (a
/// missed notice, a subscription lost with its sentinel).
pub const ASK_HEALTHY_MS: u64 = 5_000;

fn text(frame: &OwnedFrame) -> Option<&str> {
    match frame {
        OwnedFrame::BulkString(b) => core::str::from_utf8(b).ok(),
        OwnedFrame::SimpleString(s) => core::str::from_utf8(s).ok(),
        _ => None,
    }
}

/// The answer to `SENTINEL get-master-addr-by-name <name>`: the master's
/// address, `Ok(None)` if this sentinel does not know the name, `Err` for
/// anything else (an error reply, a malformed answer).
pub fn master_addr(frame: &OwnedFrame) -> Result<Option<NodeAddr>, String> {
    match frame {
        OwnedFrame::Null => Ok(None),
        OwnedFrame::Array(parts) if parts.is_empty() => Ok(None),
        OwnedFrame::Array(parts) => {
            let [host, port] = parts.as_slice() else {
                return Err(format!("an address of {} parts", parts.len()));
            };
            let (Some(host), Some(port)) = (text(host), text(port)) else {
                return Err("an address that is not text".to_owned());
            };
            node(host, port)
                .ok_or_else(|| format!("an unusable address {host}:{port}"))
                .map(Some)
        }
        OwnedFrame::Error(e) => Err(e.clone()),
        _ => Err("not an address".to_owned()),
    }
}

fn node(host: &str, port: &str) -> Option<NodeAddr> {
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let valid = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b));
    valid.then(|| NodeAddr {
        host: host.to_owned(),
        port,
    })
}

/// Whether a `ROLE` reply says master.
pub fn is_master(frame: &OwnedFrame) -> bool {
    match frame {
        OwnedFrame::Array(parts) => parts.first().and_then(text) == Some("master"),
        _ => false,
    }
}

/// The role a `ROLE` reply names, for a refusal (`replica`, `sentinel`).
pub fn role(frame: &OwnedFrame) -> String {
    match frame {
        OwnedFrame::Array(parts) => parts.first().and_then(text).unwrap_or("?").to_owned(),
        OwnedFrame::Error(e) => e.clone(),
        _ => "?".to_owned(),
    }
}

/// A subscription's message: the new address if it is a `+switch-master`
/// of `master` (`<name> <old-ip> <old-port> <new-ip> <new-port>`).
pub fn switched_to(message: &OwnedFrame, master: &str) -> Option<NodeAddr> {
    let OwnedFrame::Array(parts) = message else {
        return None;
    };
    let [kind, channel, payload] = parts.as_slice() else {
        return None;
    };
    if text(kind)? != "message" || text(channel)? != SWITCH_CHANNEL {
        return None;
    }
    let words: Vec<&str> = text(payload)?.split(' ').collect();
    let [name, _, _, host, port] = words.as_slice() else {
        return None;
    };
    if *name != master {
        return None;
    }
    node(host, port)
}

/// When to ask the sentinels next: soon and then less often while the
/// master is down or unknown, every `ASK_HEALTHY_MS` while it answers.
#[derive(Debug)]
pub struct AskBackoff {
    down_ms: u64,
}

impl Default for AskBackoff {
    fn default() -> Self {
        AskBackoff {
            down_ms: ASK_FIRST_MS,
        }
    }
}

impl AskBackoff {
    /// The wait before the next question; `healthy`: the master answers.
    pub fn next(&mut self, healthy: bool) -> u64 {
        if healthy {
            self.down_ms = ASK_FIRST_MS;
            return ASK_HEALTHY_MS;
        }
        let wait = self.down_ms;
        self.down_ms = (self.down_ms * 2).min(ASK_MAX_MS);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> OwnedFrame {
        OwnedFrame::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn the_masters_address_is_read_from_the_sentinels_answer() {
        let answer = OwnedFrame::Array(vec![bulk("127.0.0.1"), bulk("6380")]);
        assert_eq!(
            master_addr(&answer),
            Ok(Some(NodeAddr {
                host: "127.0.0.1".to_owned(),
                port: 6380
            }))
        );
        assert_eq!(master_addr(&OwnedFrame::Null), Ok(None), "unknown name");
        for bad in [
            OwnedFrame::Array(vec![bulk("127.0.0.1")]),
            OwnedFrame::Array(vec![bulk("127.0.0.1"), bulk("0")]),
            OwnedFrame::Array(vec![bulk("bad host"), bulk("6379")]),
            OwnedFrame::Error("ERR unknown".to_owned()),
            OwnedFrame::Integer(1),
        ] {
            assert!(master_addr(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn role_says_master_or_names_what_it_is() {
        let master = OwnedFrame::Array(vec![bulk("master"), OwnedFrame::Integer(0)]);
        let replica = OwnedFrame::Array(vec![bulk("slave"), bulk("127.0.0.1")]);
        assert!(is_master(&master));
        assert!(!is_master(&replica));
        assert_eq!(role(&replica), "slave");
        assert!(!is_master(&OwnedFrame::Error("NOPERM".to_owned())));
    }

    #[test]
    fn a_switch_master_notice_of_our_master_gives_the_new_address() {
        let notice = |payload: &str| {
            OwnedFrame::Array(vec![bulk("message"), bulk(SWITCH_CHANNEL), bulk(payload)])
        };
        assert_eq!(
            switched_to(
                &notice("mymaster 127.0.0.1 6379 127.0.0.1 6380"),
                "mymaster"
            ),
            Some(NodeAddr {
                host: "127.0.0.1".to_owned(),
                port: 6380
            })
        );
        assert_eq!(
            switched_to(&notice("other 127.0.0.1 6379 127.0.0.1 6380"), "mymaster"),
            None,
            "another master's failover"
        );
        assert_eq!(switched_to(&notice("mymaster 1 2"), "mymaster"), None);
        let subscribed = OwnedFrame::Array(vec![
            bulk("subscribe"),
            bulk(SWITCH_CHANNEL),
            OwnedFrame::Integer(1),
        ]);
        assert_eq!(switched_to(&subscribed, "mymaster"), None);
    }

    #[test]
    fn the_sentinels_are_asked_ever_less_often_while_the_master_is_down() {
        let mut b = AskBackoff::default();
        let waits: Vec<u64> = (0..7).map(|_| b.next(false)).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1_600, 2_000, 2_000]);
        assert_eq!(b.next(true), ASK_HEALTHY_MS);
        assert_eq!(b.next(false), 100, "a new outage starts afresh");
    }
}

//! What a rejection is counted under in the worker's log: its client, or
//! the keyed limit that refused it. A scraper rotating through the
//! addresses of a refused /24 is one new client a request; counted per
//! client, each of them would write a full line. Counted under the /24
//! (`limit=net key=198.51.100.0/24`), the /24 writes one line and then
//! one summary per interval, however many addresses it sends from.

use super::RefusedBy;
use crate::decision::Outcome;
use crate::limiter::limits::{LimitName, Limits};
use crate::store::KeyValues;

/// Whose count a rejection joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Under<'a> {
    /// The client's (its `pow_shield_key`; its address when that is empty).
    Client(&'a [u8]),
    /// A limit counted by its own `key=`, for one value (a /24, an AS,
    /// the site).
    Limit(RefusedBy<'a>),
}

/// What a rejection is counted under: a challenge sent because a limit
/// with its own `key=` had no room, under that limit and value; anything
/// else under the client: a refusal by the client's own limit, a failed
/// solution, a block or ban, a trap, an outage. Those are about what the
/// client did (they strike it, or follow its strikes); a keyed limit's
/// refusal is about its network, whichever address sent the request.
pub fn noted_under<'a>(outcome: Outcome, by: Option<RefusedBy<'a>>, client: &'a [u8]) -> Under<'a> {
    match by {
        Some(by) if outcome == Outcome::Challenge && by.key.is_some() => Under::Limit(by),
        _ => Under::Client(client),
    }
}

/// The location's keyed limits with the request's value for each (a
/// limit whose value is empty or missing left the request out): where a
/// challenge the client pays may have been counted.
pub fn keyed_values<'a>(
    limits: &'a Limits,
    values: KeyValues<'a>,
) -> impl Iterator<Item = (LimitName, &'a [u8])> + 'a {
    values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.filter(|v| !v.is_empty()).map(|v| (i, v)))
        .filter(|&(i, _)| limits.is_keyed(i))
        .map(|(i, v)| (limits.name(i), v))
}

/// A limit's name ends at this byte in a table key (a name is letters,
/// digits, `_`, `-` and `.`).
const NAME_END: u8 = 0;

impl Under<'_> {
    /// The log's table key, written into `id`: a first byte that tells a
    /// client (`c`) from a limit (`l`), since a client key can be any
    /// bytes; a limit's name, then its value.
    pub(super) fn write_id(self, id: &mut Vec<u8>) {
        id.clear();
        match self {
            Under::Client(client) => {
                id.push(b'c');
                id.extend_from_slice(client);
            }
            Under::Limit(by) => {
                id.push(b'l');
                id.extend_from_slice(by.name.as_bytes());
                id.push(NAME_END);
                id.extend_from_slice(by.key.unwrap_or_default());
            }
        }
    }
}

/// The words naming a limit's table key (`limit=net
/// key=198.51.100.0/24`, escaped as in its rejection line); `None` for a
/// client's.
pub(super) fn limit_words(id: &[u8]) -> Option<String> {
    let rest = id.strip_prefix(b"l")?;
    let end = rest.iter().position(|&b| b == NAME_END)?;
    let name = core::str::from_utf8(&rest[..end]).ok()?;
    let key = rest.get(end + 1..)?;
    Some(
        RefusedBy {
            name,
            key: Some(key),
        }
        .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keyed_limits_challenge_is_counted_under_the_limit_and_the_rest_under_the_client() {
        let net = RefusedBy {
            name: "net",
            key: Some(b"198.51.100.0/24"),
        };
        let own = RefusedBy {
            name: "60r/m",
            key: None,
        };
        let client = &b"198.51.100.7"[..];
        // (outcome, the refusing limit, counted under)
        let rows = [
            (Outcome::Challenge, Some(net), Under::Limit(net)),
            (Outcome::Challenge, Some(own), Under::Client(client)),
            (Outcome::Challenge, None, Under::Client(client)),
            (Outcome::Invalid, Some(net), Under::Client(client)),
            (Outcome::Invalid, Some(own), Under::Client(client)),
            (Outcome::Blocked, None, Under::Client(client)),
            (Outcome::Banned, None, Under::Client(client)),
            (Outcome::Trap, None, Under::Client(client)),
            (Outcome::Unavailable, None, Under::Client(client)),
        ];
        for (outcome, by, under) in rows {
            assert_eq!(
                noted_under(outcome, by, client),
                under,
                "{outcome:?} {by:?}"
            );
        }
    }

    #[test]
    fn a_client_key_never_names_a_limit() {
        let mut id = Vec::new();
        let net = RefusedBy {
            name: "net",
            key: Some(b"198.51.100.0/24"),
        };
        Under::Limit(net).write_id(&mut id);
        let limit = id.clone();
        assert_eq!(
            limit_words(&limit).as_deref(),
            Some("limit=net key=198.51.100.0/24")
        );
        // a client key of the limit's very bytes is still a client
        Under::Client(&limit).write_id(&mut id);
        assert_ne!(id, limit);
        assert_eq!(limit_words(&id), None);
        Under::Client(b"l").write_id(&mut id);
        assert_eq!(limit_words(&id), None);
    }

    #[test]
    fn a_limits_words_are_escaped_as_in_its_rejection_line() {
        let mut id = Vec::new();
        let by = RefusedBy {
            name: "tenant",
            key: Some(b"a \"b\"\n\0"),
        };
        Under::Limit(by).write_id(&mut id);
        assert_eq!(limit_words(&id), Some(by.to_string()));
        assert_eq!(
            limit_words(&id).as_deref(),
            Some("limit=tenant key=a\\x20\\x22b\\x22\\x0a\\x00")
        );
    }

    #[test]
    fn a_payment_may_belong_to_each_keyed_limit_with_a_value() {
        use crate::limiter::limits::KeyId;
        use crate::limiter::RateLimit;
        let rate = |requests| RateLimit {
            requests,
            window_ms: 60_000,
        };
        let mut limits = Limits::NONE;
        limits.push(rate(60), None).unwrap();
        for (n, name, key) in [
            (300, "net", "$pow_shield_net"),
            (1000, "site", "site"),
            (5, "tenant", "$http_x_tenant"),
        ] {
            let name = LimitName::new(name).ok();
            limits
                .push_keyed(rate(n), name, Some(KeyId::of(key)))
                .unwrap();
        }
        let values: [Option<&[u8]>; 4] = [None, Some(b"192.0.2.0/24"), Some(b"site"), Some(b"")];
        let got: Vec<(String, &[u8])> = keyed_values(&limits, &values)
            .map(|(name, v)| (name.as_str().to_owned(), v))
            .collect();
        assert_eq!(
            got,
            [
                ("net".to_owned(), &b"192.0.2.0/24"[..]),
                ("site".to_owned(), &b"site"[..])
            ]
        );
    }
}

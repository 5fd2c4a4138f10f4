//! Configurations `nginx -t` accepts but warns of (docs/directives.md:
//! a key that is a header alone, under pow_shield_key; a location that only
//! `return`s, in the introduction; `slot=net` where no limit can count per
//! network, under pow_shield_redis): what each warning says, without nginx.

use crate::redis::cluster::ClientSlot;

/// The variable a `pow_shield_key` value is, when it is one request header
/// variable alone (`$http_x_api_key`, `${http_x_api_key}`): a request
/// without that header has an empty key and is exempt, never counted.
pub fn lone_header_key(value: &str) -> Option<&str> {
    let name = value.strip_prefix('$')?;
    let name = match name.strip_prefix('{') {
        Some(braced) => braced.strip_suffix('}')?,
        None => name,
    };
    let header = name.strip_prefix("http_")?;
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '_';
    (!header.is_empty() && header.chars().all(plain)).then_some(name)
}

/// The warning of a key that is a header variable alone, `at` where the
/// directive is.
pub fn header_key_warning(variable: &str, at: &str) -> String {
    format!(
        "\"pow_shield_key ${variable}\" exempts every request without that header \
         (an empty key is never counted): map it and fall back to $pow_shield_client \
         (docs/directives.md, pow_shield_key) in {at}"
    )
}

/// The warning of a shielded location whose first rewrite directive is an
/// unconditional `return`: the rewrite phase answers before the access
/// phase, so the shield never runs there. `location` is the location's
/// name (empty: the server level), `at` where it is, `limit_at` where its
/// `pow_shield_limit` (or `pow_shield_trap`) is.
pub fn return_warning(location: &str, at: &str, limit_at: &str) -> String {
    let place = match location {
        "" => "the server".to_owned(),
        name => format!("location \"{name}\""),
    };
    format!(
        "{place} answers with \"return\" in the rewrite phase, before the access \
         phase: the shield ({limit_at}) never runs there; serve files or proxy_pass \
         instead in {at}"
    )
}

/// Whether a `key=` text may count per network: any text with a variable
/// may (`$pow_shield_net` itself, or a `map` that gives it); only a
/// constant (`key=site`) surely does not.
pub fn may_count_per_network(key: &str) -> bool {
    key.contains('$')
}

/// The warning of `pow_shield_redis ... cluster slot=net` (`at` where it
/// is) where no `pow_shield_limit` of the configuration has a `key=` that
/// may count per network (`per_network`: one has): the client's keys then
/// share its network's slot for no call saved, and a busy network loads
/// one master with all its clients. `None`: nothing to warn of.
pub fn slot_net_warning(slot: ClientSlot, per_network: bool, at: &str) -> Option<String> {
    if slot != ClientSlot::Net || per_network {
        return None;
    }
    Some(format!(
        "\"slot=net\" spreads clients over the masters by network for nothing: \
         no pow_shield_limit counts key=$pow_shield_net, whose call it would share; \
         remove slot=net, or add such a limit (docs/operations.md, \
         \"One slot for a client and its network\") in {at}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_net_is_warned_of_only_where_no_limit_may_count_per_network() {
        for (slot, per_network, warned) in [
            (ClientSlot::Net, false, true),
            (ClientSlot::Net, true, false),
            (ClientSlot::Own, false, false),
            (ClientSlot::Own, true, false),
        ] {
            let warning = slot_net_warning(slot, per_network, "nginx.conf:3");
            assert_eq!(warning.is_some(), warned, "{slot:?} {per_network}");
        }
        let warning = slot_net_warning(ClientSlot::Net, false, "nginx.conf:3").unwrap();
        assert!(warning.starts_with("\"slot=net\" spreads clients"));
        assert!(warning.ends_with(" in nginx.conf:3"));
        for (key, may) in [
            ("$pow_shield_net", true),
            ("${pow_shield_net}", true),
            ("$scraper_net", true),
            ("net:$pow_shield_net", true),
            ("$pow_shield_as", true),
            ("site", false),
            ("everyone", false),
        ] {
            assert_eq!(may_count_per_network(key), may, "{key}");
        }
    }

    #[test]
    fn a_key_that_is_a_header_variable_alone_is_a_trap() {
        assert_eq!(lone_header_key("$http_x_api_key"), Some("http_x_api_key"));
        assert_eq!(lone_header_key("${http_x_api_key}"), Some("http_x_api_key"));
        assert_eq!(
            lone_header_key("$http_authorization"),
            Some("http_authorization")
        );
    }

    #[test]
    fn a_key_with_a_fallback_or_of_another_source_is_none() {
        for value in [
            "$pow_key",
            "$pow_shield_client",
            "api:$http_x_api_key",
            "$http_x_api_key$remote_addr",
            "$remote_addr",
            "$http_",
            "${http_x",
            "http_x_api_key",
        ] {
            assert_eq!(lone_header_key(value), None, "{value}");
        }
    }

    #[test]
    fn the_warnings_name_the_variable_the_location_and_where_they_are() {
        let key = header_key_warning("http_x_api_key", "nginx.conf:12");
        assert!(key.starts_with("\"pow_shield_key $http_x_api_key\" exempts every request"));
        assert!(key.ends_with(" in nginx.conf:12"));
        let ret = return_warning("/api/", "nginx.conf:20", "nginx.conf:21");
        assert!(ret.starts_with("location \"/api/\" answers with \"return\""));
        assert!(ret.contains("the shield (nginx.conf:21) never runs there"));
        assert!(ret.ends_with(" in nginx.conf:20"));
        assert!(return_warning("", "a:1", "a:2").starts_with("the server answers"));
    }
}

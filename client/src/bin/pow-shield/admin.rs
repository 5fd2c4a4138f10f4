//! `pow-shield admin <url> show|lift <key>`: the operator's view of one
//! client at a `pow_shield_admin` location (docs/operations.md, "Seeing
//! and lifting a block"): `show` is `GET <url>?key=<key>`, `lift` is
//! `DELETE <url>?key=<key>`; the JSON answer is printed as it came.

use std::io::{Read, Write};

use clap::{Arg, ArgMatches, Command};

use crate::exit;

pub fn command() -> Command {
    Command::new("admin")
        .about("Show or lift a client's block at a pow_shield_admin location")
        .arg(
            Arg::new("url")
                .required(true)
                .help("The pow_shield_admin location, e.g. http://127.0.0.1/pow-shield/admin"),
        )
        .arg(
            Arg::new("action")
                .required(true)
                .value_parser(["show", "lift"])
                .help("show: the client's counts, strikes, block and ban; lift: lift its block and ban"),
        )
        .arg(
            Arg::new("key")
                .required(true)
                .help("The key: a client's address (as $pow_shield_client), your pow_shield_key value, or a limit's key= value (198.51.100.0/24, site)"),
        )
}

/// Exit 0 for a 2xx answer, 22 (as `get -f`) for any other.
pub fn run(m: &ArgMatches) -> u8 {
    let (Some(url), Some(action), Some(key)) = (
        m.get_one::<String>("url"),
        m.get_one::<String>("action"),
        m.get_one::<String>("key"),
    ) else {
        return exit::USAGE;
    };
    let target = match with_key(url, key) {
        Ok(target) => target,
        Err(e) => {
            eprintln!("pow-shield admin: {e}");
            return exit::USAGE;
        }
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let sent = match action.as_str() {
        "lift" => agent.delete(&target).call(),
        _ => agent.get(&target).call(),
    };
    let mut response = match sent {
        Ok(response) => response,
        Err(e) => {
            eprintln!("pow-shield admin: {target}: {e}");
            return exit::TRANSPORT;
        }
    };
    let status = response.status();
    let mut body = Vec::new();
    if let Err(e) = response.body_mut().as_reader().read_to_end(&mut body) {
        eprintln!("pow-shield admin: reading the answer: {e}");
        return exit::READ;
    }
    if std::io::stdout().write_all(&body).is_err() {
        return exit::WRITE;
    }
    if status.is_success() {
        exit::OK
    } else {
        eprintln!("pow-shield admin: {status}");
        exit::HTTP_ERROR
    }
}

/// `url` with `key=<key>` (percent-encoded) added to its query; an error
/// when its query has a `key=` already (the server would read that one,
/// and show or lift another client than the one named).
fn with_key(url: &str, key: &str) -> Result<String, String> {
    let query = url
        .split('#')
        .next()
        .unwrap_or(url)
        .split_once('?')
        .map(|(_, q)| q);
    if query.is_some_and(|q| q.split('&').any(|p| p == "key" || p.starts_with("key="))) {
        return Err(format!(
            "{url} has a key= in its query already: give the location's URL without it, and the key as the last argument"
        ));
    }
    let mut out = String::with_capacity(url.len() + key.len() + 5);
    out.push_str(url);
    out.push(if url.contains('?') { '&' } else { '?' });
    out.push_str("key=");
    for b in key.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(b))
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::parse;

    #[test]
    fn the_key_is_percent_encoded_into_the_query() {
        assert_eq!(
            with_key("http://h/admin", "2001:db8::/64").unwrap(),
            "http://h/admin?key=2001%3Adb8%3A%3A%2F64"
        );
        assert_eq!(
            with_key("http://h/a?x=1", "api 1").unwrap(),
            "http://h/a?x=1&key=api%201"
        );
    }

    #[test]
    fn a_url_with_a_key_of_its_own_is_refused() {
        assert!(with_key("http://h/a?key=192.0.2.1", "192.0.2.7").is_err());
        assert!(with_key("http://h/a?x=1&key=", "192.0.2.7").is_err());
        assert!(with_key("http://h/a?monkey=1", "192.0.2.7").is_ok());
        let m = parse(&["admin", "http://h/a?key=192.0.2.1", "lift", "192.0.2.7"]).unwrap();
        let (_, sub) = m.subcommand().unwrap();
        assert_eq!(run(sub), exit::USAGE);
    }

    #[test]
    fn show_and_lift_are_the_actions() {
        assert!(parse(&["admin", "http://h/a", "show", "192.0.2.7"]).is_ok());
        assert!(parse(&["admin", "http://h/a", "lift", "192.0.2.7"]).is_ok());
        assert!(parse(&["admin", "http://h/a", "drop", "192.0.2.7"]).is_err());
        assert!(parse(&["admin", "http://h/a", "show"]).is_err());
    }
}

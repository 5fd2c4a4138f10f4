//! Where a URL leads: `-o`/`-O` names, `-L`'s `Location`, and what to do
//! about a rejected certificate.

use clap::ArgMatches;
use pow_shield_client::blocking::Reply;

use super::header;

/// Where each URL's body goes: `-o FILE` and `-O` (`""`: the URL's own
/// name) in the order given, one per URL; URLs beyond them go to stdout.
pub fn outputs(m: &ArgMatches) -> Vec<String> {
    let mut given: Vec<(usize, String)> = Vec::new();
    if let (Some(idx), Some(vals)) = (m.indices_of("output"), m.get_many::<String>("output")) {
        given.extend(idx.zip(vals.cloned()));
    }
    if let Some(idx) = m.indices_of("remote-name") {
        given.extend(idx.map(|i| (i, String::new())));
    }
    given.sort_by_key(|(i, _)| *i);
    given.into_iter().map(|(_, o)| o).collect()
}

/// The last path segment of `url`, curl's `-O` name.
pub fn remote_name(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path = rest.split(['?', '#']).next().unwrap_or("");
    match path.split_once('/') {
        Some((_, path)) => path.rsplit('/').next().unwrap_or(""),
        None => "",
    }
}

/// The `Location` of a redirect (301, 302, 303, 307, 308).
pub fn redirect(reply: &Reply) -> Option<&str> {
    matches!(reply.status, 301 | 302 | 303 | 307 | 308)
        .then(|| header(reply, "Location"))
        .flatten()
        .filter(|l| !l.is_empty())
}

/// `location` resolved against `base` (RFC 3986 §5.2, the forms servers send).
pub fn join(base: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_owned();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    if let Some(rest) = location.strip_prefix("//") {
        return format!("{scheme}://{rest}");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    if location.starts_with('/') {
        return format!("{scheme}://{authority}{location}");
    }
    let path = &rest[authority.len()..];
    let path = path.split(['?', '#']).next().unwrap_or("");
    if location.starts_with('?') {
        return format!("{scheme}://{authority}{path}{location}");
    }
    let dir = match path.rfind('/') {
        Some(at) => &path[..=at],
        None => "/",
    };
    format!("{scheme}://{authority}{dir}{location}")
}

/// What to do about a rejected certificate, from OpenSSL's reason.
pub fn certificate_hint(why: &str) -> &'static str {
    if why.contains("mismatch") {
        "the certificate is for another host name; \
         to skip verification (not recommended), use -k/--insecure"
    } else {
        "to trust the server's CA, give it with --cacert FILE; \
         to skip verification (not recommended), use -k/--insecure"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::get_matches;

    #[test]
    fn locations_are_resolved_against_the_url() {
        let base = "http://h:8/a/b/c?q=1";
        assert_eq!(join(base, "https://x/y"), "https://x/y");
        assert_eq!(join(base, "//x/y"), "http://x/y");
        assert_eq!(join(base, "/y"), "http://h:8/y");
        assert_eq!(join(base, "d"), "http://h:8/a/b/d");
        assert_eq!(join(base, "?r=2"), "http://h:8/a/b/c?r=2");
        assert_eq!(join("http://h", "d"), "http://h/d");
    }

    #[test]
    fn remote_name_is_the_last_path_segment() {
        assert_eq!(remote_name("http://h/a/data.json?x=1"), "data.json");
        assert_eq!(remote_name("http://h/a/"), "");
        assert_eq!(remote_name("http://h"), "");
    }

    #[test]
    fn outputs_pair_with_urls_in_order() {
        let m = get_matches(&[
            "get",
            "http://h/a",
            "-O",
            "http://h/b",
            "-o",
            "x",
            "http://h/c",
        ]);
        assert_eq!(outputs(&m), vec![String::new(), "x".to_owned()]);
    }

    #[test]
    fn certificate_hint_suits_the_reason() {
        assert!(certificate_hint("unable to get local issuer certificate").contains("--cacert"));
        assert!(certificate_hint("IP address mismatch").contains("another host name"));
    }
}

//! The request every URL of `pow-shield get` is sent with, from its flags
//! (curl's meanings), and whom `https://` trusts.

use std::io::{self, Read};

use clap::ArgMatches;
use pow_shield_client::blocking::{Request, Trust};

use crate::exit;

/// `-k` wins over `--cacert`, as in curl.
pub fn trust(m: &ArgMatches) -> Result<Trust, (u8, String)> {
    if m.get_flag("insecure") {
        return Ok(Trust::Insecure);
    }
    match m.get_one::<String>("cacert") {
        Some(path) => std::fs::read(path)
            .map(Trust::CaPem)
            .map_err(|e| (exit::CACERT, format!("--cacert {path}: {e}"))),
        None => Ok(Trust::System),
    }
}

/// The request every URL is sent with (the URL is filled in per transfer).
pub fn build_request(m: &ArgMatches) -> Result<Request, (u8, String)> {
    let mut headers = Vec::new();
    for h in m.get_many::<String>("header").into_iter().flatten() {
        let Some((name, value)) = h.split_once(':') else {
            return Err((
                exit::BAD_REQUEST,
                format!("header {h:?} is not \"Name: value\""),
            ));
        };
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    let has = |headers: &[(String, String)], name: &str| {
        headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name))
    };
    if let Some(agent) = m.get_one::<String>("user-agent") {
        if !has(&headers, "User-Agent") {
            headers.push(("User-Agent".to_owned(), agent.clone()));
        }
    }
    if let Some(user) = m.get_one::<String>("user") {
        use base64::Engine as _;
        let user = if user.contains(':') {
            user.clone()
        } else {
            format!("{user}:")
        };
        let basic = base64::engine::general_purpose::STANDARD.encode(user);
        if !has(&headers, "Authorization") {
            headers.push(("Authorization".to_owned(), format!("Basic {basic}")));
        }
    }
    let body = body(m).map_err(|(flag, e)| (exit::READ, format!("{flag}: {e}")))?;
    let json = m.contains_id("json") && m.get_many::<String>("json").is_some();
    if json {
        for (name, value) in [
            ("Content-Type", "application/json"),
            ("Accept", "application/json"),
        ] {
            if !has(&headers, name) {
                headers.push((name.to_owned(), value.to_owned()));
            }
        }
    } else if body.is_some() && !has(&headers, "Content-Type") {
        // As curl does for -d.
        headers.push((
            "Content-Type".to_owned(),
            "application/x-www-form-urlencoded".to_owned(),
        ));
    }
    if m.get_flag("compressed") && !has(&headers, "Accept-Encoding") {
        headers.push(("Accept-Encoding".to_owned(), "deflate, gzip".to_owned()));
    }
    let method = match m.get_one::<String>("request") {
        Some(x) => x.clone(),
        None if m.get_flag("head") => "HEAD".to_owned(),
        None if body.is_some() => "POST".to_owned(),
        None => "GET".to_owned(),
    };
    Ok(Request {
        method,
        url: String::new(),
        headers,
        body,
    })
}

/// The body of `-d`, `--data-binary` and `--json`, in the order given: -d
/// and --data-binary parts joined with `&`, --json parts concatenated.
fn body(m: &ArgMatches) -> Result<Option<Vec<u8>>, (&'static str, io::Error)> {
    let mut parts: Vec<(usize, &'static str, &String)> = Vec::new();
    for id in ["data", "data-binary", "json"] {
        if let (Some(idx), Some(vals)) = (m.indices_of(id), m.get_many::<String>(id)) {
            parts.extend(idx.zip(vals).map(|(i, v)| (i, id, v)));
        }
    }
    if parts.is_empty() {
        return Ok(None);
    }
    parts.sort_by_key(|(i, _, _)| *i);
    let mut body = Vec::new();
    for (n, (_, id, value)) in parts.into_iter().enumerate() {
        let mut bytes = read_data(value).map_err(|e| (id, e))?;
        if id == "data" && value.starts_with('@') {
            // curl's -d @file: the file's CR and LF are dropped.
            bytes.retain(|b| *b != b'\r' && *b != b'\n');
        }
        if n > 0 && id != "json" {
            body.push(b'&');
        }
        body.extend(bytes);
    }
    Ok(Some(body))
}

fn read_data(d: &str) -> io::Result<Vec<u8>> {
    match d.strip_prefix('@') {
        Some("-") => {
            let mut buf = Vec::new();
            io::stdin().read_to_end(&mut buf)?;
            Ok(buf)
        }
        Some(path) => std::fs::read(path),
        None => Ok(d.as_bytes().to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::get_matches;

    #[test]
    fn get_collects_repeated_headers_and_defaults_to_get() {
        let m = get_matches(&["get", "http://h/x", "-H", "A: 1", "-H", "B:2"]);
        let r = build_request(&m).unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(
            r.headers,
            vec![("A".into(), "1".into()), ("B".into(), "2".into())]
        );
        assert_eq!(r.body, None);
    }

    #[test]
    fn data_makes_a_form_post_unless_told_otherwise() {
        let r = build_request(&get_matches(&["get", "http://h/", "-d", "a=1"])).unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.body.as_deref(), Some(&b"a=1"[..]));
        assert!(r.headers.contains(&(
            "Content-Type".into(),
            "application/x-www-form-urlencoded".into()
        )));
        let r = build_request(&get_matches(&[
            "get",
            "http://h/",
            "-X",
            "PUT",
            "-d",
            "{}",
            "-H",
            "content-type: application/json",
        ]))
        .unwrap();
        assert_eq!(r.method, "PUT");
        assert_eq!(r.headers.len(), 1);
    }

    #[test]
    fn data_parts_are_joined_with_ampersands_and_json_sets_its_headers() {
        let r = build_request(&get_matches(&[
            "get",
            "http://h/",
            "-d",
            "a=1",
            "--data-binary",
            "b=2",
            "-d",
            "c=3",
        ]))
        .unwrap();
        assert_eq!(r.body.as_deref(), Some(&b"a=1&b=2&c=3"[..]));
        let r = build_request(&get_matches(&["get", "http://h/", "--json", "{\"a\":1}"])).unwrap();
        assert_eq!(r.method, "POST");
        assert!(r
            .headers
            .contains(&("Content-Type".into(), "application/json".into())));
        assert!(r
            .headers
            .contains(&("Accept".into(), "application/json".into())));
    }

    #[test]
    fn user_is_basic_authentication_and_head_is_a_head_request() {
        let r = build_request(&get_matches(&[
            "get",
            "http://h/",
            "-u",
            "alice:s3cret",
            "-I",
        ]))
        .unwrap();
        assert_eq!(r.method, "HEAD");
        assert!(r
            .headers
            .contains(&("Authorization".into(), "Basic YWxpY2U6czNjcmV0".into())));
    }

    #[test]
    fn header_without_a_colon_is_refused() {
        let m = get_matches(&["get", "http://h/", "-H", "nocolon"]);
        assert_eq!(build_request(&m).unwrap_err().0, exit::BAD_REQUEST);
    }

    #[test]
    fn system_store_by_default_cacert_replaces_it_and_k_wins() {
        assert_eq!(
            trust(&get_matches(&["get", "https://h/"])),
            Ok(Trust::System)
        );
        let pem = std::env::temp_dir().join(format!("pow-shield-ca-{}.pem", std::process::id()));
        std::fs::write(&pem, "PEM").unwrap();
        let path = pem.to_str().unwrap();
        assert_eq!(
            trust(&get_matches(&["get", "https://h/", "--cacert", path])),
            Ok(Trust::CaPem(b"PEM".to_vec()))
        );
        assert_eq!(
            trust(&get_matches(&["get", "https://h/", "--cacert", path, "-k"])),
            Ok(Trust::Insecure)
        );
        std::fs::remove_file(&pem).unwrap();
        assert_eq!(
            trust(&get_matches(&["get", "https://h/", "--cacert", path]))
                .unwrap_err()
                .0,
            exit::CACERT
        );
    }
}

//! `-w`/`--write-out`: curl's format of variables printed after each
//! transfer (`%{http_code}`, `%{time_total}`, ...), with its `\n`, `\r`,
//! `\t` escapes and `%%`.

use std::time::Duration;

/// What one transfer leaves for `-w`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transfer {
    /// The last response's status, 0 (printed `000`) without one.
    pub http_code: u16,
    /// From the start to the last byte, solves and waits included.
    pub time_total: Duration,
    /// Body bytes as received (before `--compressed` decompresses them).
    pub size_download: u64,
    /// The last URL fetched (after `-L`).
    pub url_effective: String,
    /// Redirects followed.
    pub num_redirects: u32,
    /// The last response's `Content-Type`.
    pub content_type: String,
    /// The transfer's exit code.
    pub exitcode: u8,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Var(Var),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Var {
    HttpCode,
    TimeTotal,
    SizeDownload,
    UrlEffective,
    NumRedirects,
    ContentType,
    ExitCode,
}

/// A parsed `-w` format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteOut(Vec<Piece>);

impl WriteOut {
    /// Parses a format, or `@file` / `@-` for one read from a file or stdin.
    /// An unknown variable is warned about on stderr and prints nothing, as
    /// in curl.
    pub fn parse(format: &str) -> Result<WriteOut, String> {
        let text = match format.strip_prefix('@') {
            Some("-") => std::io::read_to_string(std::io::stdin()).map_err(|e| e.to_string())?,
            Some(path) => std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?,
            None => format.to_owned(),
        };
        Ok(WriteOut(pieces(&text)))
    }

    /// The text for one transfer.
    pub fn render(&self, t: &Transfer) -> String {
        let mut out = String::new();
        for piece in &self.0 {
            match piece {
                Piece::Text(s) => out.push_str(s),
                Piece::Var(v) => out.push_str(&match v {
                    Var::HttpCode => format!("{:03}", t.http_code),
                    Var::TimeTotal => format!("{:.6}", t.time_total.as_secs_f64()),
                    Var::SizeDownload => t.size_download.to_string(),
                    Var::UrlEffective => t.url_effective.clone(),
                    Var::NumRedirects => t.num_redirects.to_string(),
                    Var::ContentType => t.content_type.clone(),
                    Var::ExitCode => t.exitcode.to_string(),
                }),
            }
        }
        out
    }
}

fn pieces(text: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut lit = String::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("%{") {
            if let Some((name, tail)) = after.split_once('}') {
                match var(name) {
                    Some(v) => {
                        out.push(Piece::Text(std::mem::take(&mut lit)));
                        out.push(Piece::Var(v));
                    }
                    None => eprintln!("pow-shield: unknown --write-out variable: '{name}'"),
                }
                rest = tail;
                continue;
            }
        }
        let (s, skip) = match (c, rest.get(1..2)) {
            ('%', Some("%")) => ("%", 2),
            ('\\', Some("n")) => ("\n", 2),
            ('\\', Some("r")) => ("\r", 2),
            ('\\', Some("t")) => ("\t", 2),
            ('\\', Some("\\")) => ("\\", 2),
            _ => {
                lit.push(c);
                rest = &rest[c.len_utf8()..];
                continue;
            }
        };
        lit.push_str(s);
        rest = &rest[skip..];
    }
    out.push(Piece::Text(lit));
    out.retain(|p| p != &Piece::Text(String::new()));
    out
}

fn var(name: &str) -> Option<Var> {
    Some(match name {
        "http_code" | "response_code" => Var::HttpCode,
        "time_total" => Var::TimeTotal,
        "size_download" => Var::SizeDownload,
        "url_effective" => Var::UrlEffective,
        "num_redirects" => Var::NumRedirects,
        "content_type" => Var::ContentType,
        "exitcode" => Var::ExitCode,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_and_escapes_render_as_curl_does() {
        let w =
            WriteOut::parse(r"%{http_code} %{size_download} %{url_effective} %{time_total}\n100%%")
                .unwrap();
        let t = Transfer {
            http_code: 200,
            time_total: Duration::from_micros(1_234_567),
            size_download: 26,
            url_effective: "http://h/x".into(),
            ..Transfer::default()
        };
        assert_eq!(w.render(&t), "200 26 http://h/x 1.234567\n100%");
        assert_eq!(w.render(&Transfer::default()), "000 0  0.000000\n100%");
    }

    #[test]
    fn an_unknown_variable_prints_nothing() {
        let w = WriteOut::parse("a%{bogus}b%{exitcode}").unwrap();
        assert_eq!(
            w.render(&Transfer {
                exitcode: 7,
                ..Transfer::default()
            }),
            "ab7"
        );
    }
}

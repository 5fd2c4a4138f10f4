//! `asn-geo`: an iptoasn.com IP-to-AS table (TSV, plain or gzip) as an
//! nginx `geo` include of `network AS<number>;` lines, for
//! `pow_shield_limit ... key=$pow_shield_as` (docs/operations.md, "Per
//! autonomous system"). The conversion is the library's
//! [`pow_shield_client::asn_geo`].

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};

use clap::{Arg, ArgAction, ArgMatches, Command};
use flate2::read::MultiGzDecoder;
use pow_shield_client::asn_geo::{self, Converter, Keep};

use crate::exit;

pub fn command() -> Command {
    Command::new("asn-geo")
        .about("Turn an iptoasn.com IP-to-AS table (TSV, or .tsv.gz) into an nginx geo include: network AS<number>;")
        .after_help(
            "Use it as:  geo $pow_shield_as { include FILE; default \"\"; }\n\
             Unrouted ranges (AS 0) are left out: their addresses get the default.",
        )
        .arg(
            Arg::new("table")
                .required(true)
                .value_name("TABLE")
                .help("The table (ip2asn-combined.tsv, -v4 or -v6; gzip-compressed or not); - reads stdin"),
        )
        .arg(
            Arg::new("output")
                .short('o')
                .long("output")
                .value_name("FILE")
                .help("Write to FILE (replaced whole, only when changed) instead of stdout"),
        )
        .arg(
            Arg::new("only-v4")
                .long("only-v4")
                .action(ArgAction::SetTrue)
                .conflicts_with("only-v6")
                .help("Keep IPv4 ranges only"),
        )
        .arg(
            Arg::new("only-v6")
                .long("only-v6")
                .action(ArgAction::SetTrue)
                .help("Keep IPv6 ranges only"),
        )
}

fn complain(code: u8, msg: &str) -> u8 {
    eprintln!("pow-shield asn-geo: {msg}");
    code
}

/// The table's bytes, gunzipped when they start with gzip's magic number.
fn open(path: &str) -> io::Result<Box<dyn BufRead>> {
    let raw: Box<dyn Read> = if path == "-" {
        Box::new(io::stdin())
    } else {
        Box::new(File::open(path)?)
    };
    let mut raw = BufReader::with_capacity(1 << 16, raw);
    if raw.fill_buf()?.starts_with(&[0x1f, 0x8b]) {
        return Ok(Box::new(BufReader::with_capacity(
            1 << 16,
            MultiGzDecoder::new(raw),
        )));
    }
    Ok(Box::new(raw))
}

pub fn run(m: &ArgMatches) -> u8 {
    let Some(path) = m.get_one::<String>("table") else {
        return exit::USAGE;
    };
    let keep = if m.get_flag("only-v4") {
        Keep::V4
    } else if m.get_flag("only-v6") {
        Keep::V6
    } else {
        Keep::Both
    };
    let name = if path == "-" { "stdin" } else { path.as_str() };
    let input = match open(path) {
        Ok(r) => r,
        Err(e) => return complain(exit::READ, &format!("{name}: {e}")),
    };
    let mut converter = Converter::new(keep);
    for (i, line) in input.lines().enumerate() {
        let line = match line {
            Ok(l) => l,
            Err(e) => return complain(exit::READ, &format!("{name}:{}: {e}", i + 1)),
        };
        if let Err(e) = converter.add_line(i + 1, &line) {
            return complain(exit::FAILED, &format!("{name}:{}: {}", e.line, e.error));
        }
    }
    let counts = converter.counts();
    let entries = converter.finish();
    let mut text = format!(
        "# pow-shield asn-geo {}: {}\n",
        // a control character in a file name would end the comment line
        name.rsplit('/')
            .next()
            .unwrap_or(name)
            .replace(char::is_control, "?"),
        asn_geo::summary(entries.len(), counts)
    );
    for e in &entries {
        let _ = writeln!(text, "{e}");
    }
    let Some(file) = m.get_one::<String>("output") else {
        return match io::stdout().lock().write_all(text.as_bytes()) {
            Ok(()) => exit::OK,
            Err(e) => complain(exit::WRITE, &format!("stdout: {e}")),
        };
    };
    match crate::replace::replace_if_changed(file, &text) {
        Ok(true) => {}
        Ok(false) => {
            eprintln!("pow-shield asn-geo: {file} unchanged");
            return exit::OK;
        }
        Err(e) => return complain(exit::WRITE, &format!("{file}: {e}")),
    }
    eprintln!(
        "pow-shield asn-geo: {file} written: {}; reload nginx to use them",
        asn_geo::counted(entries.len(), "network")
    );
    exit::OK
}

#[cfg(test)]
mod tests {
    use crate::testing::parse;

    #[test]
    fn only_one_family_may_be_kept() {
        assert!(parse(&["asn-geo", "t.tsv", "--only-v4"]).is_ok());
        assert!(parse(&["asn-geo", "t.tsv", "--only-v4", "--only-v6"]).is_err());
        assert!(parse(&["asn-geo"]).is_err(), "the table is required");
    }
}

//! Web Bot Auth (docs/bots.md): `bot-key new` makes a bot's key and
//! prints the directory to publish, `bot-key sign` prints the signature
//! headers of one request, `bot-keys` fetches a bot's key directory for
//! `pow_shield_bot_keys`, and `get --sign-key` signs every request (with
//! `--sign-when-asked`, those to an origin that asked for a signature).

use std::fs;
use std::io::{Read, Write};
use std::path::Path;

use clap::{value_parser, Arg, ArgAction, ArgMatches, Command};
use pow_shield_bots::sign::{random_nonce, Params, LABEL};
use pow_shield_bots::{authority_of, KeySet, DEFAULT_LIFETIME_S};
use pow_shield_client::blocking::{Client, Request};
use pow_shield_client::{BotSigner, Policy, SigningKey};

use crate::exit::{self, error_code};

/// Where a bot serves its key directory (draft-meunier-http-message-
/// signatures-directory): a URL of only a host gets this path.
pub const WELL_KNOWN: &str = "/.well-known/http-message-signatures-directory";
/// Most bytes read of a key directory.
const MAX_DIRECTORY: u64 = 256 * 1024;

fn complain(code: u8, msg: &str) -> u8 {
    eprintln!("pow-shield: ({code}) {msg}");
    code
}

/* get --sign-key */

/// `get`'s signing options.
pub fn get_args() -> [Arg; 3] {
    [
        Arg::new("sign-key")
            .long("sign-key")
            .value_name("JWK_FILE")
            .help("Sign every request as a known bot with this private Ed25519 JWK (Web Bot Auth; pow-shield bot-key new)"),
        Arg::new("signature-agent")
            .long("signature-agent")
            .value_name("URL")
            .requires("sign-key")
            .help("With --sign-key: the bot's key directory URL, sent (signed) as Signature-Agent"),
        Arg::new("sign-when-asked")
            .long("sign-when-asked")
            .action(ArgAction::SetTrue)
            .requires("sign-key")
            .help("With --sign-key: sign only once the server asks (a 429 with Accept-Signature), sending that request again signed"),
    ]
}

/// The signer `get`'s options ask for, if any.
pub fn signer(m: &ArgMatches) -> Result<Option<BotSigner>, (u8, String)> {
    let Some(file) = m.get_one::<String>("sign-key") else {
        return Ok(None);
    };
    let text = fs::read_to_string(file).map_err(|e| (exit::FAILED, format!("{file}: {e}")))?;
    let signer = BotSigner::from_jwk(&text).map_err(|e| (exit::FAILED, format!("{file}: {e}")))?;
    let signer = match m.get_one::<String>("signature-agent") {
        Some(url) => signer.signature_agent(url),
        None => signer,
    };
    Ok(Some(if m.get_flag("sign-when-asked") {
        signer.when_asked()
    } else {
        signer
    }))
}

/* bot-key */

pub fn key_command() -> Command {
    Command::new("bot-key")
        .about("A bot's Ed25519 key for Web Bot Auth: make one, or sign a request with it")
        .subcommand_required(true)
        .subcommand(
            Command::new("new")
                .about("Write a new private key (JWK, mode 0600) and print the key directory to publish")
                .arg(Arg::new("file").required(true).value_name("KEY_FILE")),
        )
        .subcommand(
            Command::new("sign")
                .about("Print the signature headers of one request (Signature-Input, Signature, Signature-Agent)")
                .arg(Arg::new("url").required(true))
                .arg(Arg::new("sign-key").long("sign-key").value_name("JWK_FILE").required(true))
                .arg(Arg::new("signature-agent").long("signature-agent").value_name("URL"))
                .arg(int_arg("created", "Epoch seconds [default: now]"))
                .arg(int_arg("expires", "Epoch seconds [default: created + 60]"))
                .arg(Arg::new("nonce").long("nonce").value_name("TEXT").help("[default: random]")),
        )
}

fn int_arg(id: &'static str, help: &'static str) -> Arg {
    Arg::new(id)
        .long(id)
        .value_name("SECONDS")
        .value_parser(value_parser!(i64))
        .help(help)
}

pub fn run_key(m: &ArgMatches) -> u8 {
    match m.subcommand() {
        Some(("new", m)) => new_key(m),
        Some(("sign", m)) => sign(m),
        _ => exit::USAGE,
    }
}

fn new_key(m: &ArgMatches) -> u8 {
    let Some(file) = m.get_one::<String>("file") else {
        return exit::USAGE;
    };
    let key = match SigningKey::generate() {
        Ok(k) => k,
        Err(e) => return complain(exit::FAILED, &e.to_string()),
    };
    if let Err(e) = write_new_private(Path::new(file), key.private_jwk().as_bytes()) {
        return complain(exit::WRITE, &format!("{file}: {e}"));
    }
    print!("{}", key.directory());
    eprintln!(
        "pow-shield: key {} written to {file}; publish the directory above at https://<your host>{WELL_KNOWN}",
        key.thumbprint()
    );
    exit::OK
}

/// Writes a file that must not exist yet, readable by its owner only.
fn write_new_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(bytes)
}

fn sign(m: &ArgMatches) -> u8 {
    let (Some(url), Some(file)) = (m.get_one::<String>("url"), m.get_one::<String>("sign-key"))
    else {
        return exit::USAGE;
    };
    let key = match fs::read_to_string(file)
        .map_err(|e| e.to_string())
        .and_then(|t| SigningKey::from_jwk(&t).map_err(|e| e.to_string()))
    {
        Ok(k) => k,
        Err(e) => return complain(exit::FAILED, &format!("{file}: {e}")),
    };
    let Some(authority) = authority_of(url) else {
        return complain(exit::BAD_REQUEST, &format!("{url}: not an http(s) URL"));
    };
    let created = m.get_one::<i64>("created").copied().unwrap_or_else(now);
    let expires = m
        .get_one::<i64>("expires")
        .copied()
        .unwrap_or(created.saturating_add(DEFAULT_LIFETIME_S));
    let nonce = match m.get_one::<String>("nonce").cloned().map(Ok) {
        Some(n) => n,
        None => random_nonce(),
    };
    let nonce = match nonce {
        Ok(n) => n,
        Err(e) => return complain(exit::FAILED, &e.to_string()),
    };
    let signed = key.sign_as(
        LABEL,
        &Params {
            authority: &authority,
            signature_agent: m.get_one::<String>("signature-agent").map(String::as_str),
            created,
            expires,
            nonce: &nonce,
        },
    );
    match signed {
        Ok(s) => {
            for (name, value) in s.headers() {
                println!("{name}: {value}");
            }
            exit::OK
        }
        Err(e) => complain(exit::FAILED, &e.to_string()),
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/* bot-keys */

pub fn keys_command() -> Command {
    Command::new("bot-keys")
        .about(
            "Fetch a bot's key directory, check it, and write the file pow_shield_bot_keys reads",
        )
        .arg(Arg::new("url").required(true).help(format!(
            "The directory's URL (a URL of only a host gets {WELL_KNOWN})"
        )))
        .arg(
            Arg::new("output")
                .short('o')
                .long("output")
                .value_name("FILE")
                .help("Write it to FILE (replaced whole, only when changed) instead of stdout"),
        )
}

/// A host-only URL gets the well-known path.
pub fn directory_url(url: &str) -> String {
    let path_start = url.find("://").map(|i| i + 3).unwrap_or(0);
    match url[path_start..].find('/') {
        Some(i) if url.len() > path_start + i + 1 => url.to_owned(),
        Some(i) => format!("{}{WELL_KNOWN}", &url[..path_start + i]),
        None => format!("{url}{WELL_KNOWN}"),
    }
}

pub fn run_keys(m: &ArgMatches) -> u8 {
    let Some(url) = m.get_one::<String>("url") else {
        return exit::USAGE;
    };
    let url = directory_url(url);
    let request = Request {
        method: "GET".to_owned(),
        url: url.clone(),
        headers: vec![(
            "Accept".to_owned(),
            "application/http-message-signatures-directory+json, application/json".to_owned(),
        )],
        body: None,
    };
    let reply = match Client::new(Policy::default()).send(&request, &mut |_| {}) {
        Ok(r) => r,
        Err(e) => return complain(error_code(&e), &format!("{url}: {e}")),
    };
    if reply.status != 200 {
        return complain(exit::HTTP_ERROR, &format!("{url}: HTTP {}", reply.status));
    }
    let mut text = String::new();
    if let Err(e) = reply.body.take(MAX_DIRECTORY).read_to_string(&mut text) {
        return complain(exit::READ, &format!("{url}: {e}"));
    }
    let set = match KeySet::parse(&text) {
        Ok(s) => s,
        Err(e) => {
            return complain(
                exit::FAILED,
                &format!("{url}: not a usable key directory: {e}"),
            )
        }
    };
    let Some(file) = m.get_one::<String>("output") else {
        print!("{text}");
        return exit::OK;
    };
    match crate::replace::replace_if_changed(file, &text) {
        Ok(true) => {}
        Ok(false) => {
            eprintln!("pow-shield: {file} unchanged ({} keys)", set.keys.len());
            return exit::OK;
        }
        Err(e) => return complain(exit::WRITE, &format!("{file}: {e}")),
    }
    eprintln!(
        "pow-shield: {file} written: {} Ed25519 key(s) ({}); reload nginx to use them",
        set.keys.len(),
        set.keys
            .iter()
            .map(|k| k.thumbprint.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    exit::OK
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::parse;

    #[test]
    fn a_host_only_url_gets_the_well_known_path() {
        assert_eq!(
            directory_url("https://bot.example"),
            format!("https://bot.example{WELL_KNOWN}")
        );
        assert_eq!(
            directory_url("https://bot.example/"),
            format!("https://bot.example{WELL_KNOWN}")
        );
        assert_eq!(
            directory_url("https://bot.example/keys.json"),
            "https://bot.example/keys.json"
        );
    }

    #[test]
    fn signature_agent_needs_a_sign_key() {
        assert!(parse(&["get", "http://h/", "--signature-agent", "https://a/"]).is_err());
        assert!(parse(&[
            "get",
            "http://h/",
            "--sign-key",
            "k",
            "--signature-agent",
            "https://a/"
        ])
        .is_ok());
        assert!(parse(&["get", "http://h/", "--sign-when-asked"]).is_err());
        assert!(parse(&["get", "http://h/", "--sign-key", "k", "--sign-when-asked"]).is_ok());
    }
}

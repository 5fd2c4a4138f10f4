//! `pow_shield_bot_keys <name> <file>` (docs/directives.md): the key
//! directory of one bot, a JWK Set file read now (at start and at each
//! reload) and never on the request path. A file that cannot be read or
//! holds no usable key fails `nginx -t` with the file's own line.

use nginx_sys::NGX_LOG_WARN;
use ngx::ngx_conf_log_error;

use super::setters::{full_path, setter, DirectiveError};
use super::MainConf;
use pow_shield_bots::KeySet;

// The zone keeps a count for every bot a configuration may name.
const _: () = assert!(pow_shield_bots::keys::MAX_BOTS <= pow_shield_core::metrics::BOT_NAMES);

setter!(
    /// `pow_shield_bot_keys`: several lines, one bot (or one more file of
    /// a bot) each.
    set_bot_keys,
    MainConf,
    |d, mcf| {
        let (name, file) = match d.args.as_slice() {
            [name, file] => (*name, *file),
            _ => return Err(DirectiveError::invalid(d.value(), "want a bot name and a key file")),
        };
        let path = full_path(d.cf, file).ok_or(DirectiveError::Logged)?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| DirectiveError::invalid(file, format!("{path}: {e}")))?;
        let set = KeySet::parse(&text).map_err(|e| DirectiveError::invalid(file, format!("{path}: {e}")))?;
        mcf.bots.add(name, &set).map_err(|e| DirectiveError::invalid(name, e))?;
        if set.skipped > 0 {
            ngx_conf_log_error!(
                NGX_LOG_WARN,
                d.cf,
                "pow_shield_bot_keys: {} key(s) of \"{path}\" are not Ed25519 and are ignored",
                set.skipped
            );
        }
        Ok(())
    }
);

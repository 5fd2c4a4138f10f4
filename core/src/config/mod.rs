//! The directives' pure side (docs/directives.md): what each word means
//! (`values`, one parser per word, on nginx's grammar in `crate::syntax`),
//! which words each directive takes and which word a refusal names
//! (`args`, `redis`; `limit_key` for `key=`'s value, as written and as a
//! request gives it), the one format of a refusal (`directive_error`), and
//! how a location inherits what it leaves unset from its server and the
//! http block (`settings`), and what `nginx -t` warns of (`traps`). The
//! module's `src/config/` only converts nginx
//! types at the edge and calls these.

pub mod args;
pub mod directive_error;
pub mod limit_key;
pub mod redis;
pub mod settings;
pub mod traps;
pub mod values;

pub use self::directive_error::DirectiveError;
pub use self::settings::{KeySources, LogLevel, Resolved, Settings, Warning};

//! The directives' pure side (docs/directives.md): what each directive's
//! words mean and which word a refusal names (`args`, `redis`), the one
//! refusal format (`refusal`), and how a location inherits what it leaves
//! unset from its server and the http block (`settings`). The module's
//! `src/config/` only converts nginx types at the edge and calls these.

pub mod args;
pub mod redis;
pub mod refusal;
pub mod settings;

pub use self::refusal::Refusal;
pub use self::settings::{LogLevel, Resolved, Settings, Warning};

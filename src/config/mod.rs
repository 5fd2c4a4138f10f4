//! Directives (docs/directives.md). Values are parsed once, here, by the
//! pure parsers in `pow_shield_core::values`; the request path only reads
//! the resolved [`Policy`].

#[cfg(not(test))]
mod directives;

#[cfg(not(test))]
pub use directives::*;

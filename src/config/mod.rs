//! Directives (docs/directives.md). Values are parsed once, here, by the pure parsers in
//! `values`; the request path only reads the resolved [`Policy`].

pub mod values;

#[cfg(not(test))]
mod directives;

#[cfg(not(test))]
pub use directives::*;

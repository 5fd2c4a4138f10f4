//! What a verifier reads of a request: its header fields and the derived
//! components (RFC 9421 §2.2) a signature may cover. The module gives
//! nginx's view of a request; tests give fixed ones.
//!
//! [`Covered`] answers the `web-bot-auth` crate's lookups: a field's values
//! (every line of it, as the crate joins them), a Dictionary member for a
//! `;key=` parameter, a strict re-serialisation for `;sf`. Parameters this
//! verifier does not carry (`bs`, `tr`, `req`, query parameters) give no
//! value, so a signature covering them stays anonymous.

use sfv::SerializeValue;
use web_bot_auth::components::{
    CoveredComponent, DerivedComponent, HTTPField, HTTPFieldParameters,
};
use web_bot_auth::message_signatures::SignedMessage;

/// The `tag` a Web Bot Auth signature carries.
pub const TAG: &str = "web-bot-auth";

/// Clock allowance of `created` and `expires`, seconds (the one the
/// challenge tokens have too).
pub const CLOCK_ALLOWANCE_S: i64 = 5;

/// The longest lifetime (`expires - created`) a signature may claim,
/// seconds: one hour, the lifetime of the draft's own examples. The
/// replay cache holds a nonce that long, beside spent challenges: the
/// 24 hours the draft tolerates would let each nonce hold its entry a
/// day (the clients sign for 60 s).
pub const MAX_LIFETIME_S: i64 = 60 * 60;

/// The lifetime the clients give their signatures, seconds.
pub const DEFAULT_LIFETIME_S: i64 = 60;

/// A request as a signature covers it.
pub trait Message {
    /// Every value of header field `name` (lower-case) in the order
    /// received; none when absent.
    fn field(&self, name: &str) -> Vec<&str>;
    /// `@authority`: the request's host (and port, unless the scheme's
    /// default), lower-case.
    fn authority(&self) -> Option<&str>;
    /// `@method`.
    fn method(&self) -> &str;
    /// `@scheme`, lower-case.
    fn scheme(&self) -> &str;
    /// `@path`: the request target's path, as sent.
    fn path(&self) -> &str;
    /// The query without its `?`, if the target has one.
    fn query(&self) -> Option<&str>;
}

/// A [`Message`] as the crate's [`SignedMessage`].
pub(crate) struct Covered<'m, M: Message + ?Sized>(pub &'m M);

impl<M: Message + ?Sized> SignedMessage for Covered<'_, M> {
    fn lookup_component(&self, name: &CoveredComponent) -> Vec<String> {
        let m = self.0;
        let one = |v: Option<String>| v.into_iter().collect();
        match name {
            CoveredComponent::HTTP(HTTPField { name, parameters }) => {
                let values = m.field(name);
                match parameters.0.as_slice() {
                    [] => values.into_iter().map(str::to_owned).collect(),
                    [HTTPFieldParameters::Key(key)] => one(member(&values, key)),
                    [HTTPFieldParameters::Sf] => one(strict(&values)),
                    _ => Vec::new(),
                }
            }
            CoveredComponent::Derived(derived) => match derived {
                DerivedComponent::Authority { req: false } => one(m.authority().map(str::to_owned)),
                DerivedComponent::Method { req: false } => vec![m.method().to_owned()],
                DerivedComponent::Scheme { req: false } => vec![m.scheme().to_owned()],
                DerivedComponent::Path { req: false } => vec![m.path().to_owned()],
                DerivedComponent::Query { req: false } => {
                    vec![format!("?{}", m.query().unwrap_or(""))]
                }
                DerivedComponent::RequestTarget { req: false } => vec![target(m)],
                DerivedComponent::TargetUri { req: false } => one(m
                    .authority()
                    .map(|a| format!("{}://{a}{}", m.scheme(), target(m)))),
                _ => Vec::new(),
            },
        }
    }
}

/// `@request-target`: path and query as sent.
fn target<M: Message + ?Sized>(m: &M) -> String {
    match m.query() {
        Some(q) => format!("{}?{q}", m.path()),
        None => m.path().to_owned(),
    }
}

/// The field's lines as one value (RFC 9421 §2.1: trimmed, joined by ", ").
fn joined(values: &[&str]) -> Option<String> {
    if values.is_empty() {
        return None;
    }
    Some(
        values
            .iter()
            .map(|v| v.trim())
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// Dictionary member `key` of the field, serialised (RFC 9421 §2.1.2).
fn member(values: &[&str], key: &str) -> Option<String> {
    let dict = sfv::Parser::new(&joined(values)?).parse_dictionary().ok()?;
    let entry = dict.into_iter().find(|(k, _)| k.as_str() == key)?.1;
    match entry {
        sfv::ListEntry::Item(item) => Some(item.serialize_value()),
        inner @ sfv::ListEntry::InnerList(_) => {
            // An inner list serialises as the only member of a list.
            vec![inner].serialize_value()
        }
    }
}

/// The field re-serialised strictly (RFC 9421 §2.1.1): as a Dictionary,
/// else a List, else an Item.
fn strict(values: &[&str]) -> Option<String> {
    let text = joined(values)?;
    if let Ok(d) = sfv::Parser::new(&text).parse_dictionary() {
        return d.serialize_value();
    }
    if let Ok(l) = sfv::Parser::new(&text).parse_list() {
        return l.serialize_value();
    }
    sfv::Parser::new(&text)
        .parse_item()
        .ok()
        .map(|i| i.serialize_value())
}

/// A request held in memory (tests, benches, the CLI's self-check).
#[derive(Clone, Debug, Default)]
pub struct Fixed {
    pub fields: Vec<(String, String)>,
    pub authority: Option<String>,
    pub method: String,
    pub scheme: String,
    pub path: String,
    pub query: Option<String>,
}

impl Fixed {
    /// A GET of `/` on `authority` over https with these fields.
    pub fn get(authority: &str, fields: &[(&str, &str)]) -> Fixed {
        Fixed {
            fields: fields
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), (*v).to_owned()))
                .collect(),
            authority: Some(authority.to_owned()),
            method: "GET".to_owned(),
            scheme: "https".to_owned(),
            path: "/".to_owned(),
            query: None,
        }
    }
}

impl Message for Fixed {
    fn field(&self, name: &str) -> Vec<&str> {
        self.fields
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
    fn authority(&self) -> Option<&str> {
        self.authority.as_deref()
    }
    fn method(&self) -> &str {
        &self.method
    }
    fn scheme(&self) -> &str {
        &self.scheme
    }
    fn path(&self) -> &str {
        &self.path
    }
    fn query(&self) -> Option<&str> {
        self.query.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use web_bot_auth::components::HTTPFieldParametersSet;

    fn field(name: &str, parameters: Vec<HTTPFieldParameters>) -> CoveredComponent {
        CoveredComponent::HTTP(HTTPField {
            name: name.to_owned(),
            parameters: HTTPFieldParametersSet(parameters),
        })
    }

    #[test]
    fn a_key_parameter_selects_a_dictionary_member() {
        let m = Fixed::get(
            "example.com",
            &[(
                "Signature-Agent",
                r#"agent1="https://a.test", agent2="https://b.test""#,
            )],
        );
        let c = Covered(&m);
        let got = c.lookup_component(&field(
            "signature-agent",
            vec![HTTPFieldParameters::Key("agent2".into())],
        ));
        assert_eq!(got, vec![r#""https://b.test""#.to_owned()]);
        let none = c.lookup_component(&field(
            "signature-agent",
            vec![HTTPFieldParameters::Key("agent3".into())],
        ));
        assert!(none.is_empty());
    }

    #[test]
    fn every_line_of_a_field_is_returned_and_unknown_parameters_give_nothing() {
        let m = Fixed::get("example.com", &[("X-A", " 1 "), ("x-a", "2")]);
        let c = Covered(&m);
        assert_eq!(c.lookup_component(&field("x-a", vec![])), vec![" 1 ", "2"]);
        assert!(c
            .lookup_component(&field("x-a", vec![HTTPFieldParameters::Bs]))
            .is_empty());
        assert_eq!(
            c.lookup_component(&field("x-a", vec![HTTPFieldParameters::Sf])),
            vec!["1, 2"]
        );
    }

    #[test]
    fn derived_components_come_from_the_request() {
        let mut m = Fixed::get("example.com", &[]);
        m.path = "/a/b".into();
        m.query = Some("x=1".into());
        let c = Covered(&m);
        let derived = |d| c.lookup_component(&CoveredComponent::Derived(d));
        assert_eq!(
            derived(DerivedComponent::TargetUri { req: false }),
            vec!["https://example.com/a/b?x=1"]
        );
        assert_eq!(
            derived(DerivedComponent::Query { req: false }),
            vec!["?x=1"]
        );
        assert!(derived(DerivedComponent::Status { req: false }).is_empty());
        assert!(derived(DerivedComponent::Authority { req: true }).is_empty());
    }
}

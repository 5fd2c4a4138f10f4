//! `pow_shield_limit ... key=`: what `nginx -t` refuses of the value as
//! written, and what a request's value does to its limit. Two slips an
//! operator makes both count every request under one key, a site-wide
//! limit by accident: quotes inside a word, which nginx keeps (`key=""`
//! is the two characters `""`), and a `geo` value that names a variable
//! (`default $pow_shield_net;` in a `geo` block is that text, not the
//! client's network: `geo` takes its values literally).

/// Why `key=`'s value as written is refused; `None`: it is taken.
pub fn refused(value: &str) -> Option<&'static str> {
    match value {
        "" => Some("a value after \"key=\" (variables allowed)"),
        "\"\"" | "''" => Some(
            "nginx keeps quotes inside a word: this is a two-character constant, one key \
             for every request (a site-wide limit); to leave requests out of this limit, \
             give key= a map variable whose value is empty for them",
        ),
        _ => None,
    }
}

/// What a request's `key=` value does to its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyValue {
    /// Counted under this value.
    Counted,
    /// Empty: the request is left out of that limit only.
    LeftOut,
    /// A variable's name as text (`$pow_shield_net`, `${pow_shield_net}`):
    /// nginx replaces every variable of a `key=` text, so a `geo` (or a
    /// header) gave this name as a value. Counting it would count every
    /// such request under that one key, across every address and network:
    /// a site-wide limit nobody wrote. The request is left out of that
    /// limit, as with an empty value (still counted by the others), and
    /// the module warns once per worker and limit.
    VariableName,
}

/// What `value`, a request's value of a `key=` text, does to its limit;
/// `is_client_address`: whether it is the client's own address, in any
/// form (asked only of a value shaped like a name: `$binary_remote_addr`'s
/// four bytes of 36.97.98.99 read `$abc`, and such an address is counted,
/// never taken for a name). (Inline: asked of every request of a limit
/// with a `key=` of its own; the common value is decided by its first
/// byte.)
#[inline(always)]
pub fn key_value(value: &[u8], is_client_address: impl FnOnce() -> bool) -> KeyValue {
    match value.first() {
        None => KeyValue::LeftOut,
        Some(b'$') if is_variable_name(value) && !is_client_address() => KeyValue::VariableName,
        Some(_) => KeyValue::Counted,
    }
}

/// `$name` or `${name}`, where a name is what nginx reads as one:
/// letters, digits and `_`.
fn is_variable_name(value: &[u8]) -> bool {
    let Some(name) = value.strip_prefix(b"$") else {
        return false;
    };
    let name = match name.strip_prefix(b"{") {
        Some(braced) => match braced.strip_suffix(b"}") {
            Some(name) => name,
            None => return false,
        },
        None => name,
    };
    !name.is_empty() && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

/// The warning of a request's `key=` value that is a variable's name, for
/// the limit named `limit` (logged once per worker and limit). `value` is
/// a [`KeyValue::VariableName`], printable as it is.
pub fn variable_name_warning(limit: &str, value: &[u8]) -> String {
    let value = String::from_utf8_lossy(value);
    format!(
        "limit \"{limit}\" got the key value \"{value}\", a variable's name as text \
         (geo takes its values literally): requests with it are left out of this limit \
         rather than counted together as one key; give the geo default a value, \
         or \"\" to leave unknown addresses out"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_as_written_is_refused_when_empty_or_a_pair_of_quotes() {
        for (value, refused_for) in [
            ("", Some("a value after")),
            ("\"\"", Some("nginx keeps quotes inside a word")),
            ("''", Some("nginx keeps quotes inside a word")),
            ("$pow_shield_net", None),
            ("site", None),
            ("\"site\"", None),
            ("\"", None),
            ("$http_x_tenant", None),
        ] {
            let got = refused(value);
            match refused_for {
                Some(start) => assert!(got.is_some_and(|r| r.starts_with(start)), "{value}"),
                None => assert_eq!(got, None, "{value}"),
            }
        }
        let hint = refused("\"\"").unwrap_or_default();
        assert!(hint.contains("a map variable whose value is empty"));
    }

    #[test]
    fn a_value_that_names_a_variable_leaves_the_request_out_of_its_limit() {
        use KeyValue::*;
        for (value, what) in [
            (&b"198.51.100.0/24"[..], Counted),
            (b"AS64496", Counted),
            (b"site", Counted),
            (b"", LeftOut),
            (b"$pow_shield_net", VariableName),
            (b"${pow_shield_net}", VariableName),
            (b"$pow_shield_client", VariableName),
            (b"$1", VariableName),
            // Not a name alone: a value, however odd.
            (b"$", Counted),
            (b"${}", Counted),
            (b"${pow_shield_net", Counted),
            (b"$pow_shield_net:x", Counted),
            (b"$ 5", Counted),
            (b"AS$1", Counted),
        ] {
            let value_of = String::from_utf8_lossy(value);
            assert_eq!(key_value(value, || false), what, "{value_of}");
            // The client's own address, however it reads, is counted.
            let own = if what == LeftOut { LeftOut } else { Counted };
            assert_eq!(key_value(value, || true), own, "{value_of}");
        }
        // `$binary_remote_addr` of 36.97.98.99 and of 36.123.65.125.
        for address in [[36u8, 97, 98, 99], [36, 123, 65, 125]] {
            assert_eq!(key_value(&address, || false), VariableName);
            assert_eq!(key_value(&address, || true), Counted);
        }
    }

    #[test]
    fn the_warning_names_the_limit_the_value_and_what_to_do() {
        let warning = variable_name_warning("as", b"$pow_shield_net");
        assert!(warning.starts_with(
            "limit \"as\" got the key value \"$pow_shield_net\", a variable's name as text"
        ));
        assert!(warning.contains("left out of this limit"));
        assert!(warning.contains("give the geo default a value, or \"\""));
    }
}

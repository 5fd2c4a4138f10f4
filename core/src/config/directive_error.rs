//! Why a directive was refused ([`DirectiveError`]), and the one way every
//! refusal reads:
//! `invalid value "<v>" in "<directive>" directive: <reason>` (nginx
//! appends the file and line), as nginx's own setters do.

use core::fmt::Display;

/// Why a directive was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirectiveError {
    /// The directive appears twice at one level.
    Duplicate,
    /// A word of the directive is wrong: `value` is that word as written
    /// (or a stand-in when it holds a secret), `reason` says why.
    Invalid { value: String, reason: String },
    /// Already reported where it failed (nginx's complex value compiler
    /// logs its own errors).
    Logged,
    /// Another directive that says the same thing another way is set at
    /// this level already (`pow_shield_secret` and
    /// `pow_shield_secret_file`): `other` is its name.
    Conflict { other: &'static str },
}

impl DirectiveError {
    /// `value` refused for `reason`.
    pub fn invalid(value: &str, reason: impl Display) -> DirectiveError {
        DirectiveError::Invalid {
            value: value.to_owned(),
            reason: reason.to_string(),
        }
    }

    /// The line nginx logs for a refusal of `directive` (`None`: already
    /// logged).
    pub fn message(&self, directive: &str) -> Option<String> {
        match self {
            DirectiveError::Duplicate => Some(format!("\"{directive}\" directive is duplicate")),
            DirectiveError::Invalid { value, reason } => Some(format!(
                "invalid value \"{value}\" in \"{directive}\" directive: {reason}"
            )),
            DirectiveError::Logged => None,
            DirectiveError::Conflict { other } => Some(format!(
                "\"{directive}\" and \"{other}\" cannot both be set: use one of them"
            )),
        }
    }
}

/// Notes that `directive` set a value that one directive of a group may
/// set at one level (`slot`: the one that did): a second of the same is a
/// duplicate, one of the others a conflict that names both.
pub fn set_once_of(
    slot: &mut Option<&'static str>,
    directive: &'static str,
) -> Result<(), DirectiveError> {
    match *slot {
        Some(set) if set == directive => Err(DirectiveError::Duplicate),
        Some(other) => Err(DirectiveError::Conflict { other }),
        None => {
            *slot = Some(directive);
            Ok(())
        }
    }
}

/// Stores `value` into an unset slot, refusing a second occurrence.
pub fn set_once<T>(slot: &mut Option<T>, value: T) -> Result<(), DirectiveError> {
    if slot.is_some() {
        return Err(DirectiveError::Duplicate);
    }
    *slot = Some(value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_value_names_the_value_the_directive_and_the_reason() {
        let error = DirectiveError::invalid("0", "must be between 1 and 12");
        assert_eq!(
            error.message("pow_shield_difficulty").as_deref(),
            Some("invalid value \"0\" in \"pow_shield_difficulty\" directive: must be between 1 and 12")
        );
    }

    #[test]
    fn a_duplicate_reads_as_nginx_says_it() {
        assert_eq!(
            DirectiveError::Duplicate
                .message("pow_shield_limit")
                .as_deref(),
            Some("\"pow_shield_limit\" directive is duplicate")
        );
    }

    #[test]
    fn a_refusal_already_logged_is_not_logged_again() {
        assert_eq!(DirectiveError::Logged.message("pow_shield_key"), None);
    }

    #[test]
    fn one_of_two_directives_twice_is_a_duplicate_and_the_other_a_conflict() {
        let mut slot = None;
        assert_eq!(set_once_of(&mut slot, "pow_shield_secret"), Ok(()));
        assert_eq!(
            set_once_of(&mut slot, "pow_shield_secret"),
            Err(DirectiveError::Duplicate)
        );
        let conflict = set_once_of(&mut slot, "pow_shield_secret_file").unwrap_err();
        assert_eq!(
            conflict.message("pow_shield_secret_file").as_deref(),
            Some(
                "\"pow_shield_secret_file\" and \"pow_shield_secret\" cannot both be set: \
                 use one of them"
            )
        );
        assert_eq!(slot, Some("pow_shield_secret"));
    }

    #[test]
    fn a_slot_takes_one_value_then_refuses_a_second() {
        let mut slot = None;
        assert_eq!(set_once(&mut slot, 1), Ok(()));
        assert_eq!(set_once(&mut slot, 2), Err(DirectiveError::Duplicate));
        assert_eq!(slot, Some(1));
    }
}

//! HTTP dates (RFC 9110 §5.6.7), for `Retry-After`, read by the `httpdate`
//! crate as Unix seconds.
//!
//! Kept here: years 0000 to 1969, which the grammar allows (`year =
//! 4DIGIT`) and `httpdate` refuses. A `Retry-After` date before 1970 is
//! still a date, one in the past: no wait, not an ignored header. It is
//! read as the same day 400 years on (the Gregorian calendar, day names
//! included, repeats every 146 097 days), then moved back.
//!
//! Not kept: a leap second (`23:59:60`), which `httpdate` refuses; a
//! `Retry-After` at one is ignored, as an unreadable one is.

use std::time::UNIX_EPOCH;

/// Seconds in 400 Gregorian years.
const CYCLE: i64 = 146_097 * 86_400;

/// Unix seconds of an HTTP date in any of its three forms:
///
/// - IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT` (what servers send);
/// - RFC 850: `Sunday, 06-Nov-94 08:49:37 GMT` (years 70–99 are 19xx,
///   00–69 are 20xx);
/// - asctime: `Sun Nov  6 08:49:37 1994`.
///
/// `None` for anything else, including impossible dates (30 February) and
/// a day name that is not the date's.
pub fn parse(value: &str) -> Option<i64> {
    let value = value.trim();
    if let Some(t) = unix(value) {
        return Some(t);
    }
    // The 4-digit year of an IMF-fixdate or an asctime date (an RFC 850
    // date is 30 characters or more).
    let at = match value.len() {
        29 => 12..16,
        24 => 20..24,
        _ => return None,
    };
    let year = value.get(at.clone())?;
    if !year.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let year: i64 = year.parse().ok()?;
    if year >= 1970 {
        return None;
    }
    let cycles = (1970 - year + 399) / 400;
    let later = format!(
        "{}{:04}{}",
        &value[..at.start],
        year + 400 * cycles,
        &value[at.end..]
    );
    Some(unix(&later)? - cycles * CYCLE)
}

/// What `httpdate` reads: 1970 to 9999.
fn unix(value: &str) -> Option<i64> {
    let t = httpdate::parse_http_date(value).ok()?;
    i64::try_from(t.duration_since(UNIX_EPOCH).ok()?.as_secs()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9110's example date.
    const EXAMPLE: i64 = 784_111_777;

    #[test]
    fn the_three_forms_of_the_rfc_example_are_the_same_instant() {
        assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 GMT"), Some(EXAMPLE));
        assert_eq!(parse("Sunday, 06-Nov-94 08:49:37 GMT"), Some(EXAMPLE));
        assert_eq!(parse("Sun Nov  6 08:49:37 1994"), Some(EXAMPLE));
    }

    #[test]
    fn dates_around_the_epoch_leap_days_and_centuries() {
        assert_eq!(parse("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(parse("Thu, 29 Feb 2024 00:00:00 GMT"), Some(1_709_164_800));
        assert_eq!(parse("Tue, 29 Feb 2000 12:00:00 GMT"), Some(951_825_600));
        assert_eq!(parse("Fri, 31 Dec 1999 23:59:59 GMT"), Some(946_684_799));
        assert_eq!(parse("Wed, 31 Dec 1969 23:59:59 GMT"), Some(-1));
        assert_eq!(
            parse("Fri, 31 Dec 9999 23:59:59 GMT"),
            Some(253_402_300_799)
        );
    }

    #[test]
    fn two_digit_years_below_70_are_this_century() {
        assert_eq!(
            parse("Thursday, 29-Feb-24 00:00:00 GMT"),
            Some(1_709_164_800)
        );
        assert_eq!(parse("Thursday, 01-Jan-70 00:00:00 GMT"), Some(0));
    }

    #[test]
    fn surrounding_whitespace_is_ignored() {
        assert_eq!(parse("  Sun, 06 Nov 1994 08:49:37 GMT "), Some(EXAMPLE));
    }

    #[test]
    fn impossible_dates_and_times_are_refused() {
        for bad in [
            "Fri, 30 Feb 2024 00:00:00 GMT",
            "Thu, 29 Feb 2023 00:00:00 GMT",
            "Sun, 31 Nov 1994 08:49:37 GMT",
            "Sun, 00 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:60:00 GMT",
            "Sun, 06 Nov 1994 08:49:61 GMT",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn other_texts_are_not_dates() {
        for bad in [
            "",
            "120",
            "1994-11-06T08:49:37Z",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Nov 1994 08:49:37",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 94 08:49:37 GMT",
            "Sun, 06 nov 1994 08:49:37 GMT",
            "Sun, +6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 8:49:37 GMT",
            "Sun, 06 Nov 1994 08:49 GMT",
            "Sun, 06 Nov 1994 08:49:37:00 GMT",
            "Sunday, 06-Nov-1994 08:49:37 GMT",
            "Sun, 06-Nov-94 08:49:37 GMT",
            "Someday, 06 Nov 1994 08:49:37 GMT",
            "Sun Nov  6 08:49:37 94",
            "Sun Nov  6 08:49:37 1994 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT trailing",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}

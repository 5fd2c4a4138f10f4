//! HTTP dates (RFC 9110 §5.6.7), for `Retry-After`: the three forms a
//! recipient must accept, read as Unix seconds.

/// Day names as the short (IMF-fixdate, asctime) and long (RFC 850) forms
/// spell them.
pub const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
pub const LONG_DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
pub const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Unix seconds of an HTTP date in any of its three forms:
///
/// - IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT` (what servers send);
/// - RFC 850: `Sunday, 06-Nov-94 08:49:37 GMT` (years 70–99 are 19xx,
///   00–69 are 20xx);
/// - asctime: `Sun Nov  6 08:49:37 1994`.
///
/// `None` for anything else, including impossible dates (30 February).
/// The day name is checked to be one, not to match the date.
pub fn parse(value: &str) -> Option<i64> {
    let value = value.trim();
    let (year, month, day, time) = if let Some((name, rest)) = value.split_once(", ") {
        let rest = rest.strip_suffix(" GMT")?;
        let (date, time) = rest.rsplit_once(' ')?;
        if DAYS.contains(&name) {
            let mut parts = date.split(' ');
            let day = parts.next()?;
            let month = parts.next()?;
            let year = parts.next()?;
            if parts.next().is_some() || day.len() != 2 || year.len() != 4 {
                return None;
            }
            (number(year)?, month, number(day)?, time)
        } else if LONG_DAYS.contains(&name) {
            let mut parts = date.split('-');
            let day = parts.next()?;
            let month = parts.next()?;
            let year = parts.next()?;
            if parts.next().is_some() || day.len() != 2 || year.len() != 2 {
                return None;
            }
            let yy = number(year)?;
            let century = if yy < 70 { 2000 } else { 1900 };
            (century + yy, month, number(day)?, time)
        } else {
            return None;
        }
    } else {
        // asctime: the day of the month is space-padded ("Nov  6").
        let mut parts = value.split_ascii_whitespace();
        let name = parts.next()?;
        let month = parts.next()?;
        let day = parts.next()?;
        let time = parts.next()?;
        let year = parts.next()?;
        if parts.next().is_some() || !DAYS.contains(&name) || day.len() > 2 || year.len() != 4 {
            return None;
        }
        (number(year)?, month, number(day)?, time)
    };
    let month = MONTHS.iter().position(|m| *m == month)? as u32 + 1;
    if day == 0 || day > days_in_month(year, month) {
        return None;
    }
    let mut hms = time.split(':');
    let (h, m, s) = (hms.next()?, hms.next()?, hms.next()?);
    if hms.next().is_some() || [h, m, s].iter().any(|p| p.len() != 2) {
        return None;
    }
    let (h, m, s) = (number(h)?, number(m)?, number(s)?);
    // 60: a leap second, as the grammar allows.
    if h > 23 || m > 59 || s > 60 {
        return None;
    }
    Some(days_from_civil(year, month, day as u32) * 86_400 + h * 3600 + m * 60 + s)
}

/// ASCII digits only (`str::parse` would take a sign).
fn number(digits: &str) -> Option<i64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn days_in_month(year: i64, month: u32) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar
/// (Howard Hinnant's algorithm: years counted from March, in 400-year eras).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
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

//! A summary line's words: `12,345 more rejections of client=192.0.2.7
//! in the last 10 s`, or for a keyed limit's count `1,234 more rejections
//! under limit=net key=198.51.100.0/24 in the last 10 s`.

use core::fmt;

/// A summary line: `count` rejections of one client, or under one keyed
/// limit's value, not written, over the last `over_ms`. `tag` is what the
/// caller noted with the last rejection counted (its address, the level
/// to write at). A challenge (429) its client paid in the interval is no
/// rejection: `count` leaves it out, and the line says how many there were
/// (`paid`) and how many of those counted are challenges not paid
/// (`unpaid`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary<T> {
    pub count: u64,
    pub over_ms: u64,
    pub tag: T,
    pub unpaid: u64,
    pub paid: u64,
    /// The keyed limit counted, as its rejection line names it
    /// (`limit=net key=198.51.100.0/24`); `None`: a client's count.
    pub limit: Option<String>,
}

impl<T> Summary<T> {
    /// The line's words after `pow_shield: `; a client's count names it
    /// as `client`.
    pub fn message<'a>(&'a self, client: &'a str) -> impl fmt::Display + 'a {
        SummaryLine {
            count: self.count,
            over_ms: self.over_ms,
            under: match &self.limit {
                Some(words) => Whose::Limit(words),
                None => Whose::Client(client),
            },
            unpaid: self.unpaid,
            paid: self.paid,
        }
    }
}

enum Whose<'a> {
    Client(&'a str),
    Limit(&'a str),
}

struct SummaryLine<'a> {
    count: u64,
    over_ms: u64,
    under: Whose<'a>,
    unpaid: u64,
    paid: u64,
}

impl fmt::Display for SummaryLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.count == 1 {
            "rejection"
        } else {
            "rejections"
        };
        write!(f, "{} more {what} ", Thousands(self.count))?;
        match self.under {
            Whose::Client(client) => write!(f, "of client={client}")?,
            Whose::Limit(words) => write!(f, "under {words}")?,
        }
        write!(f, " in the last {} s", self.over_ms.div_ceil(1000).max(1))?;
        if self.paid > 0 {
            let what = if self.unpaid == 1 {
                "challenge"
            } else {
                "challenges"
            };
            write!(
                f,
                " ({} unpaid {what}; {} paid, not counted)",
                Thousands(self.unpaid),
                Thousands(self.paid)
            )?;
        }
        Ok(())
    }
}

/// `12345` as `12,345`.
struct Thousands(u64);

impl fmt::Display for Thousands {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.0.to_string();
        for (i, d) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(count: u64, over_ms: u64, limit: Option<&str>, (unpaid, paid): (u64, u64)) -> String {
        Summary {
            count,
            over_ms,
            tag: (),
            unpaid,
            paid,
            limit: limit.map(str::to_owned),
        }
        .message("2001:db8::1")
        .to_string()
    }

    #[test]
    fn summary_lines_count_in_thousands_and_whole_seconds() {
        assert_eq!(
            line(1, 400, None, (0, 0)),
            "1 more rejection of client=2001:db8::1 in the last 1 s"
        );
        assert_eq!(
            line(999, 1_000, None, (0, 0)),
            "999 more rejections of client=2001:db8::1 in the last 1 s"
        );
        assert_eq!(
            line(1_000, 10_001, None, (0, 0)),
            "1,000 more rejections of client=2001:db8::1 in the last 11 s"
        );
        assert_eq!(
            line(1_234_567, 60_000, None, (0, 0)),
            "1,234,567 more rejections of client=2001:db8::1 in the last 60 s"
        );
    }

    #[test]
    fn a_keyed_limits_line_names_the_limit_and_its_value_not_a_client() {
        let net = Some("limit=net key=198.51.100.0/24");
        assert_eq!(
            line(1_234, 10_000, net, (0, 0)),
            "1,234 more rejections under limit=net key=198.51.100.0/24 in the last 10 s"
        );
        assert_eq!(
            line(1, 1_000, Some("limit=site key=site"), (0, 0)),
            "1 more rejection under limit=site key=site in the last 1 s"
        );
        assert_eq!(
            line(3, 10_000, net, (1, 40)),
            "3 more rejections under limit=net key=198.51.100.0/24 in the last 10 s \
             (1 unpaid challenge; 40 paid, not counted)"
        );
    }
}

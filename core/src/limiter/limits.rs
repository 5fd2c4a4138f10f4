//! Stacked limits (docs/directives.md, pow_shield_limit): several
//! `pow_shield_limit` lines in one context, as `limit_req` stacks. A
//! request is counted against every limit or none: it is admitted when
//! each has room (and then counted by each), refused by the first, in the
//! order written, that has none (its `Retry-After`; the others count
//! nothing). The headers report the tightest limit of an admitted request
//! (fewest remaining) and the refusing one of a refused request.

use core::fmt;

use super::{RateLimit, Verdict};

/// Most `pow_shield_limit` lines in one context.
pub const MAX_LIMITS: usize = 8;
/// Longest `name=`.
pub const MAX_NAME: usize = 32;

/// A limit's `name=`, or the one its numbers give (`10r/s`, `1000r/h`,
/// `5r/30s`): the `RateLimit-Policy` item and the metrics' `limit` label.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct LimitName {
    bytes: [u8; MAX_NAME],
    len: u8,
}

impl LimitName {
    /// `name=`'s value: 1 to 32 letters, digits, `_`, `-` or `.` (an
    /// sf-token for the header and a label value without escapes).
    pub fn new(name: &str) -> Result<LimitName, &'static str> {
        if name.is_empty() || name.len() > MAX_NAME {
            return Err("a name of 1 to 32 characters");
        }
        if !name.starts_with(|c: char| c.is_ascii_alphabetic())
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        {
            return Err(
                "a name of letters, digits, \"_\", \"-\" and \".\", starting with a letter",
            );
        }
        Ok(Self::copied(name.as_bytes()))
    }

    /// The name an unnamed limit gets from its numbers: per second,
    /// minute, hour or day when its window is one, else per so many seconds.
    /// (Written in place, no `format!`: a response's headers name it.)
    pub fn derived(limit: RateLimit) -> LimitName {
        let mut name = LimitName {
            bytes: [0; MAX_NAME],
            len: 0,
        };
        name.push_decimal(limit.requests.into());
        name.push(b"r/");
        match limit.window_ms / 1000 {
            1 => name.push(b"s"),
            60 => name.push(b"m"),
            3600 => name.push(b"h"),
            86_400 => name.push(b"d"),
            s => {
                name.push_decimal(s);
                name.push(b"s");
            }
        }
        name
    }

    /// Appends `more`, as much of it as fits in [`MAX_NAME`].
    fn push(&mut self, more: &[u8]) {
        let at = usize::from(self.len);
        let n = more.len().min(MAX_NAME - at);
        self.bytes[at..at + n].copy_from_slice(&more[..n]);
        self.len += n as u8;
    }

    /// Appends `n` in decimal (as `push`).
    fn push_decimal(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[at..]);
    }

    fn copied(from: &[u8]) -> LimitName {
        let mut bytes = [0; MAX_NAME];
        let len = from.len().min(MAX_NAME);
        bytes[..len].copy_from_slice(&from[..len]);
        LimitName {
            bytes,
            len: len as u8,
        }
    }

    pub fn as_str(&self) -> &str {
        core::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    /// The name's bytes (ASCII), without `as_str`'s UTF-8 check.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl fmt::Debug for LimitName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl fmt::Display for LimitName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

const NO_LIMIT: RateLimit = RateLimit {
    requests: 0,
    window_ms: 0,
};

/// One `pow_shield_limit` line: its numbers, how it counts, its name and
/// whose count it is. Plain data, the same from the configuration to the
/// stores, the scripts' arguments and the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub rate: RateLimit,
    /// `approx`: Redis counts it with the sliding-window counter (local
    /// mode counts every limit in its window alike).
    pub approx: bool,
    /// `name=` (`None`: named by its numbers, [`Limit::name`]).
    pub named: Option<LimitName>,
    /// Its `key=` as written (`None`: counted per client key); the
    /// module finds the value's compiled source by it.
    pub key: Option<KeyId>,
    /// Its place among the configuration's limit names, the metrics'
    /// `limit` label (`crate::metrics::LIMIT_NAMES`), noted once the
    /// configuration is read; `None`: counted without the label (a
    /// location's one unnamed limit).
    pub label: Option<u8>,
}

impl Limit {
    /// An unnamed, exact limit per client key.
    pub const fn new(rate: RateLimit) -> Limit {
        Limit {
            rate,
            approx: false,
            named: None,
            key: None,
            label: None,
        }
    }

    /// The same limit counted `approx`.
    pub const fn approx(self) -> Limit {
        Limit {
            approx: true,
            ..self
        }
    }

    /// The same limit counted per its `key=`.
    pub const fn keyed(self, key: KeyId) -> Limit {
        Limit {
            key: Some(key),
            ..self
        }
    }

    /// The same limit named.
    pub const fn with_name(self, name: LimitName) -> Limit {
        Limit {
            named: Some(name),
            ..self
        }
    }

    /// Its `name=`, else the one its numbers give.
    pub fn name(&self) -> LimitName {
        match self.named {
            Some(name) => name,
            None => LimitName::derived(self.rate),
        }
    }

    /// It counts per its own `key=`, not per client key.
    pub fn is_keyed(&self) -> bool {
        self.key.is_some()
    }
}

const NONE_YET: Limit = Limit::new(NO_LIMIT);

/// The limits of one context, in the order written: a list of [`Limit`]s.
/// Plain data: a location's policy holds it, a request borrows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    list: [Limit; MAX_LIMITS],
    len: u8,
}

/// A limit's `key=` value as written (its text's SHA-256, cut to 64
/// bits): two limits of one context with the same key and numbers would
/// share one count, and `nginx -t` refuses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyId(u64);

impl KeyId {
    pub fn of(written: &str) -> KeyId {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(written.as_bytes());
        let mut first = [0; 8];
        first.copy_from_slice(&digest[..8]);
        KeyId(u64::from_le_bytes(first))
    }

    /// The identity as a number (the same on every node and across
    /// reloads: the price policy's words).
    pub fn get(self) -> u64 {
        self.0
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::NONE
    }
}

/// Why a limit cannot join the others of its context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackError {
    TooMany,
    /// Its name, or the one its numbers give, is taken.
    DuplicateName,
    /// The same requests, window, key and counting twice (they would
    /// share one count).
    DuplicateLimit,
}

impl StackError {
    pub fn message(self) -> String {
        match self {
            StackError::TooMany => {
                format!("at most {MAX_LIMITS} \"pow_shield_limit\" lines in one context")
            }
            StackError::DuplicateName => "a name another \"pow_shield_limit\" of this context \
                                          has (\"name=\" tells them apart)"
                .to_owned(),
            StackError::DuplicateLimit => {
                "the same limit and key as another \"pow_shield_limit\" of this context".to_owned()
            }
        }
    }
}

impl Limits {
    pub const NONE: Limits = Limits {
        list: [NONE_YET; MAX_LIMITS],
        len: 0,
    };

    /// One unnamed limit: a location as before limits stacked.
    pub const fn one(limit: RateLimit) -> Limits {
        Limits::of(Limit::new(limit))
    }

    /// One limit alone.
    pub const fn of(limit: Limit) -> Limits {
        let mut limits = Limits::NONE;
        limits.list[0] = limit;
        limits.len = 1;
        limits
    }

    /// Adds the next line's limit, counted per client key.
    pub fn push(&mut self, limit: RateLimit, name: Option<LimitName>) -> Result<(), StackError> {
        self.push_keyed(limit, name, None)
    }

    /// Adds the next line's limit, counted per its `key=` (`None`: per
    /// client key).
    pub fn push_keyed(
        &mut self,
        limit: RateLimit,
        name: Option<LimitName>,
        key: Option<KeyId>,
    ) -> Result<(), StackError> {
        self.add(Limit {
            named: name,
            key,
            ..Limit::new(limit)
        })
    }

    /// Adds the next line's limit. The same numbers and key twice would
    /// share one count in local mode (which counts `approx` alike), so
    /// they are refused whatever their counting.
    pub fn add(&mut self, limit: Limit) -> Result<(), StackError> {
        let at = usize::from(self.len);
        if at >= MAX_LIMITS {
            return Err(StackError::TooMany);
        }
        let written = self.as_slice();
        if written
            .iter()
            .any(|l| l.rate == limit.rate && l.key == limit.key)
        {
            return Err(StackError::DuplicateLimit);
        }
        let wanted = limit.name();
        if written.iter().any(|l| l.name() == wanted) {
            return Err(StackError::DuplicateName);
        }
        self.list[at] = limit;
        self.len += 1;
        Ok(())
    }

    /// Limit `i` counts per its own `key=`, not per client key.
    pub fn is_keyed(&self, i: usize) -> bool {
        self.key(i).is_some()
    }

    /// Limit `i`'s `key=` as written (`None`: counted per client key).
    pub fn key(&self, i: usize) -> Option<KeyId> {
        self.limit(i).and_then(|l| l.key)
    }

    /// Some limit counts per its own `key=`.
    #[inline]
    pub fn any_keyed(&self) -> bool {
        self.as_slice().iter().any(Limit::is_keyed)
    }

    /// The limits `keep` keeps, in order, with each one's index here (a
    /// request left out of some limits by an empty `key=` value).
    pub fn only(&self, keep: impl Fn(usize) -> bool) -> (Limits, [u8; MAX_LIMITS]) {
        let mut kept = Limits::NONE;
        let mut at = [0; MAX_LIMITS];
        for (i, limit) in self.as_slice().iter().enumerate().filter(|&(i, _)| keep(i)) {
            let n = usize::from(kept.len);
            kept.list[n] = *limit;
            at[n] = i as u8;
            kept.len += 1;
        }
        (kept, at)
    }

    /// Every limit, in the order written.
    #[inline]
    pub fn as_slice(&self) -> &[Limit] {
        &self.list[..usize::from(self.len)]
    }

    /// Each limit's numbers, in the order written.
    pub fn rates(&self) -> impl Iterator<Item = RateLimit> + '_ {
        self.as_slice().iter().map(|l| l.rate)
    }

    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn first(&self) -> Option<RateLimit> {
        self.get(0)
    }

    /// Limit `i`'s numbers.
    #[inline]
    pub fn get(&self, i: usize) -> Option<RateLimit> {
        self.limit(i).map(|l| l.rate)
    }

    /// Limit `i`.
    #[inline]
    pub fn limit(&self, i: usize) -> Option<&Limit> {
        self.as_slice().get(i)
    }

    /// As a location with one limit has always been: unnamed and alone
    /// (`RateLimit-Policy: "pow-shield"`, no `limit` label).
    pub fn is_plain(&self) -> bool {
        self.len == 1 && self.list[0].named.is_none()
    }

    /// Limit `i`'s name (`name=`, else derived from its numbers).
    pub fn name(&self, i: usize) -> LimitName {
        self.limit(i).unwrap_or(&NONE_YET).name()
    }

    /// Notes limit `i`'s place among the metrics' limit names.
    pub fn set_label(&mut self, i: usize, label: Option<u8>) {
        if let Some(limit) = self.list[..usize::from(self.len)].get_mut(i) {
            limit.label = label;
        }
    }

    /// Whether limit `i` counts `approx`.
    #[inline]
    pub fn approx(&self, i: usize) -> bool {
        self.limit(i).is_some_and(|l| l.approx)
    }
}

/// The verdict of a request checked against every limit, from each
/// limit's verdict as it would be if the request were counted: the first
/// refusal (in the order written), else the tightest (fewest remaining;
/// the first of equals). `limit` says which.
pub fn stacked_verdict(verdicts: &[Verdict]) -> Verdict {
    let refused = verdicts.iter().position(|v| !v.allowed);
    let at = refused.unwrap_or_else(|| {
        (0..verdicts.len())
            .min_by_key(|&i| verdicts[i].remaining)
            .unwrap_or(0)
    });
    let mut verdict = verdicts.get(at).copied().unwrap_or_default();
    verdict.limit = at as u8;
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    const BURST: RateLimit = RateLimit {
        requests: 10,
        window_ms: 1_000,
    };
    const HOURLY: RateLimit = RateLimit {
        requests: 1000,
        window_ms: 3_600_000,
    };

    fn name(s: &str) -> Option<LimitName> {
        Some(LimitName::new(s).unwrap())
    }

    #[test]
    fn an_unnamed_limit_is_named_by_its_numbers() {
        let derived = |requests, window_ms| {
            LimitName::derived(RateLimit {
                requests,
                window_ms,
            })
            .to_string()
        };
        assert_eq!(derived(10, 1_000), "10r/s");
        assert_eq!(derived(60, 60_000), "60r/m");
        assert_eq!(derived(1000, 3_600_000), "1000r/h");
        assert_eq!(derived(5, 86_400_000), "5r/d");
        assert_eq!(derived(5, 30_000), "5r/30s");
        assert_eq!(derived(0, 0), "0r/0s");
        let longest = derived(u32::MAX, u64::MAX);
        assert_eq!(longest, format!("{}r/{}s", u32::MAX, u64::MAX / 1000));
    }

    #[test]
    fn names_are_tokens_of_up_to_32_characters() {
        assert_eq!(LimitName::new("burst").unwrap().as_str(), "burst");
        assert_eq!(
            LimitName::new("api.v2-hourly_x").unwrap().as_str(),
            "api.v2-hourly_x"
        );
        assert!(LimitName::new("").is_err());
        assert!(LimitName::new(&"a".repeat(33)).is_err());
        assert!(LimitName::new("has space").is_err());
        assert!(LimitName::new("quo\"te").is_err());
        assert!(LimitName::new("9lives").is_err());
    }

    #[test]
    fn one_unnamed_limit_is_plain_and_a_named_or_second_one_is_not() {
        assert!(Limits::one(BURST).is_plain());
        let mut named = Limits::NONE;
        named.push(BURST, name("burst")).unwrap();
        assert!(!named.is_plain());
        let mut two = Limits::one(BURST);
        two.push(HOURLY, None).unwrap();
        assert!(!two.is_plain());
        assert_eq!(
            (two.name(0).as_str(), two.name(1).as_str()),
            ("10r/s", "1000r/h")
        );
    }

    #[test]
    fn a_stack_refuses_a_limit_beyond_the_most_a_taken_name_and_the_same_limit_twice() {
        let mut limits = Limits::NONE;
        limits.push(BURST, name("burst")).unwrap();
        assert_eq!(
            limits.push(HOURLY, name("burst")),
            Err(StackError::DuplicateName)
        );
        assert_eq!(
            limits.push(BURST, name("again")),
            Err(StackError::DuplicateLimit)
        );
        // Counted `approx`, the same numbers and key still share the
        // zone's count in local mode.
        assert_eq!(
            limits.add(
                Limit::new(BURST)
                    .approx()
                    .with_name(LimitName::new("again").unwrap())
            ),
            Err(StackError::DuplicateLimit)
        );
        // (a name= never equals a derived name: those start with a digit)
        assert!(LimitName::new("10r/s").is_err());
        for requests in 2..=MAX_LIMITS as u32 {
            let limit = RateLimit {
                requests,
                window_ms: 60_000,
            };
            assert_eq!(limits.push(limit, None), Ok(()), "limit {requests}");
        }
        let next = RateLimit {
            requests: 99,
            window_ms: 60_000,
        };
        assert_eq!(limits.push(next, None), Err(StackError::TooMany));
        assert_eq!(limits.len(), MAX_LIMITS);
        const { assert!(MAX_LIMITS >= 8, "docs/directives.md promises 8") };
    }

    #[test]
    fn each_limit_keeps_its_own_counting_name_and_key() {
        let net = KeyId::of("$pow_shield_net");
        let mut limits = Limits::NONE;
        limits.add(Limit::new(BURST).approx()).unwrap();
        limits
            .add(
                Limit::new(HOURLY)
                    .keyed(net)
                    .with_name(LimitName::new("net").unwrap()),
            )
            .unwrap();
        let each: Vec<_> = limits
            .as_slice()
            .iter()
            .map(|l| (l.approx, l.key, l.name().to_string()))
            .collect();
        assert_eq!(
            each,
            [
                (true, None, "10r/s".to_owned()),
                (false, Some(net), "net".to_owned())
            ]
        );
        assert!(limits.approx(0) && !limits.approx(1) && !limits.approx(2));
        let (kept, at) = limits.only(|i| i == 1);
        assert_eq!((kept.as_slice()[0], at[0]), (*limits.limit(1).unwrap(), 1));
    }

    #[test]
    fn the_same_numbers_with_another_key_stack_and_with_the_same_key_do_not() {
        let net = Some(KeyId::of("$pow_shield_net"));
        let mut limits = Limits::one(BURST);
        assert!(!limits.any_keyed());
        limits.push_keyed(BURST, name("per-net"), net).unwrap();
        assert!(limits.is_keyed(1) && !limits.is_keyed(0));
        assert_eq!(
            limits.push_keyed(BURST, name("again"), net),
            Err(StackError::DuplicateLimit)
        );
        assert_eq!(
            limits.push_keyed(BURST, name("site"), Some(KeyId::of("site"))),
            Ok(())
        );
        assert_ne!(KeyId::of("site"), KeyId::of("$pow_shield_net"));
    }

    #[test]
    fn only_keeps_the_chosen_limits_with_their_places() {
        let mut limits = Limits::one(BURST);
        limits
            .push_keyed(HOURLY, name("net"), Some(KeyId::of("$net")))
            .unwrap();
        let (kept, at) = limits.only(|i| i == 1);
        assert_eq!(kept.rates().collect::<Vec<_>>(), [HOURLY]);
        assert_eq!(
            (kept.name(0).as_str(), kept.is_keyed(0), at[0]),
            ("net", true, 1)
        );
    }

    fn verdict(allowed: bool, remaining: u32, retry_after_ms: u64) -> Verdict {
        Verdict {
            allowed,
            remaining,
            retry_after_ms,
            ..Verdict::default()
        }
    }

    #[test]
    fn the_first_refusal_decides_else_the_tightest_limit_reports() {
        let admitted = stacked_verdict(&[verdict(true, 9, 0), verdict(true, 3, 0)]);
        assert_eq!(
            (admitted.allowed, admitted.remaining, admitted.limit),
            (true, 3, 1)
        );
        let refused = stacked_verdict(&[
            verdict(true, 0, 0),
            verdict(false, 0, 5_000),
            verdict(false, 0, 9_000),
        ]);
        assert_eq!(
            (refused.allowed, refused.retry_after_ms, refused.limit),
            (false, 5_000, 1)
        );
        let tie = stacked_verdict(&[verdict(true, 2, 0), verdict(true, 2, 0)]);
        assert_eq!(tie.limit, 0, "the first of equals");
    }
}

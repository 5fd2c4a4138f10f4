//! The numbers of the rate-limit headers (docs/protocol.md §2): what a
//! verdict made at `decided_at_ms` (epoch) says in `X-RateLimit-*` and the
//! IETF draft's `RateLimit`. The texts fixed per location are made at
//! configuration time; these are formatted per response.

use crate::limiter::{LimitName, Limits, Verdict};
use crate::redis::script_call::digits_before;

/// The name of limit `i` in `RateLimit-Policy` and `RateLimit`: as before
/// limits stacked, `pow-shield` for a location's one unnamed limit; else
/// the limit's name.
pub fn item_name(limits: &Limits, i: usize) -> LimitName {
    if limits.is_plain() {
        LimitName::new("pow-shield").unwrap_or_else(|_| limits.name(i))
    } else {
        limits.name(i)
    }
}

/// What starts limit `i`'s `RateLimit` value, the same in every response
/// of a location: `"<name>";r=` ([`item_name`]), made at configuration
/// time ([`HeaderValues::of_item`] takes it).
pub fn rate_limit_item(limits: &Limits, i: usize) -> String {
    format!("\"{}\";r=", item_name(limits, i))
}

/// One response's rate-limit numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimitNumbers {
    /// `X-RateLimit-Remaining`, `RateLimit: r=`.
    pub remaining: u32,
    /// `X-RateLimit-Reset`: epoch seconds at which the oldest counted
    /// request leaves the window, rounded up.
    pub reset_at_s: u64,
    /// `RateLimit: t=`: seconds until then, rounded up.
    pub reset_in_s: u64,
}

impl RateLimitNumbers {
    pub fn new(verdict: &Verdict, decided_at_ms: u64) -> Self {
        RateLimitNumbers {
            remaining: verdict.remaining,
            reset_at_s: decided_at_ms
                .saturating_add(verdict.reset_after_ms)
                .div_ceil(1000),
            reset_in_s: verdict.reset_after_ms.div_ceil(1000),
        }
    }
}

/// The per-response header values, which the module keeps in the
/// request's state (the headers point into them). Each is written right
/// to left, ending where its place in the buffer ends, so no digit is
/// counted before it is written, and `X-RateLimit-Remaining` is the digits
/// inside `RateLimit`'s `r=`, written once. Digits are written by hand, not
/// through `core::fmt` (measured: most of the headers' cost).
pub struct HeaderValues {
    buf: [u8; VALUES_CAPACITY],
    /// Each [`Value`]'s start and length in `buf` (empty: not asked for).
    spans: [(u8, u8); 4],
}

/// Where `X-RateLimit-Limit`'s digits end (a `u32`'s 10 at most), and
/// `X-RateLimit-Reset`'s (a `u64`'s 20 at most); `RateLimit` ends at the
/// buffer's end (or `X-RateLimit-Remaining`, when `RateLimit` is not
/// asked for).
const LIMIT_END: usize = 10;
const RESET_END: usize = LIMIT_END + 20;

/// Room for the longest values: the two above, and
/// `"<32-byte name>";r=<10>;t=<20>`.
const VALUES_CAPACITY: usize = 128;
const _: () = assert!(RESET_END + ITEM_CAPACITY + 10 + 3 + 20 <= VALUES_CAPACITY);
const _: () = assert!(VALUES_CAPACITY <= u8::MAX as usize);

/// Room for the longest `RateLimit` item: `"<32-byte name>";r=`.
const ITEM_CAPACITY: usize = crate::limiter::limits::MAX_NAME + 5;

/// One of the values [`HeaderValues`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// `X-RateLimit-Limit`.
    Limit = 0,
    /// `X-RateLimit-Remaining`.
    Remaining = 1,
    /// `X-RateLimit-Reset`.
    Reset = 2,
    /// `RateLimit`: `"<name>";r=<remaining>;t=<reset in>`.
    RateLimit = 3,
}

impl HeaderValues {
    /// The values of a response whose verdict is of a limit of `requests`
    /// named `name`; `x`: the `X-RateLimit-*` ones, `ietf`: `RateLimit`
    /// (a value not asked for is empty).
    #[cfg(test)]
    pub fn new(
        requests: u32,
        name: &LimitName,
        numbers: &RateLimitNumbers,
        (x, ietf): (bool, bool),
    ) -> Self {
        Self::named(Some(requests), name, numbers, (x, ietf))
    }

    /// As [`HeaderValues::new`], but `X-RateLimit-Limit` is left empty:
    /// the limit's requests are the same in every response of a location,
    /// and the module writes them once, at configuration time.
    #[cfg(test)]
    pub fn varying(name: &LimitName, numbers: &RateLimitNumbers, (x, ietf): (bool, bool)) -> Self {
        Self::named(None, name, numbers, (x, ietf))
    }

    /// The values of limit `name`, its `RateLimit` item made here.
    #[cfg(test)]
    fn named(
        requests: Option<u32>,
        name: &LimitName,
        numbers: &RateLimitNumbers,
        flags: (bool, bool),
    ) -> Self {
        let item = format!("\"{}\";r=", name.as_str());
        Self::of_item(requests, item.as_bytes(), numbers, flags)
    }

    /// The values of a response whose verdict is of a limit of `requests`
    /// (`None`: `X-RateLimit-Limit` left empty, as [`HeaderValues::varying`]
    /// leaves it) whose `RateLimit` starts with `item`
    /// ([`rate_limit_item`], made at configuration time).
    #[cfg(test)]
    pub fn of_item(
        requests: Option<u32>,
        item: &[u8],
        numbers: &RateLimitNumbers,
        flags: (bool, bool),
    ) -> Self {
        let mut v = Self::EMPTY;
        v.write(requests, item, numbers, flags);
        v
    }

    /// No values yet, for [`HeaderValues::write`].
    pub const EMPTY: HeaderValues = HeaderValues {
        buf: [0; VALUES_CAPACITY],
        spans: [(0, 0); 4],
    };

    /// Writes the values of a response whose verdict is of a limit of
    /// `requests` (`None`: `X-RateLimit-Limit` left empty) whose
    /// `RateLimit` starts with `item` ([`rate_limit_item`], made at
    /// configuration time), in place over these (empty) values: a caller
    /// that keeps them in its own frame has nothing moved there. (The
    /// module's one way; the others, made whole, are the tests'.)
    #[inline(always)]
    pub fn write(
        &mut self,
        requests: Option<u32>,
        item: &[u8],
        numbers: &RateLimitNumbers,
        (x, ietf): (bool, bool),
    ) {
        let v = self;
        // `RateLimit` from its end: `;t=<reset in>`, then the remaining
        // requests' digits (`X-RateLimit-Remaining`'s too), then the item.
        let mut end = VALUES_CAPACITY;
        if ietf {
            let t = digits_before(&mut v.buf, end, numbers.reset_in_s);
            end = t - 3;
            v.buf[end..t].copy_from_slice(b";t=");
        }
        let r = digits_before(&mut v.buf, end, u64::from(numbers.remaining));
        if x {
            v.set(Value::Remaining, r, end);
            let reset = digits_before(&mut v.buf, RESET_END, numbers.reset_at_s);
            v.set(Value::Reset, reset, RESET_END);
            if let Some(requests) = requests {
                let limit = digits_before(&mut v.buf, LIMIT_END, u64::from(requests));
                v.set(Value::Limit, limit, LIMIT_END);
            }
        }
        if ietf {
            // (An item longer than its capacity is never made: it is
            // left out rather than written over the values before it.)
            let start = r.saturating_sub(item.len()).max(RESET_END);
            if let Some(room) = v.buf.get_mut(start..r) {
                if room.len() == item.len() {
                    room.copy_from_slice(item);
                    v.set(Value::RateLimit, start, VALUES_CAPACITY);
                }
            }
        }
    }

    /// `value` lies at `start..end`.
    #[inline(always)]
    fn set(&mut self, value: Value, start: usize, end: usize) {
        // (Within the capacity, which fits a byte: asserted above.)
        self.spans[value as usize] = (start as u8, (end - start) as u8);
    }

    /// The buffer the values lie in ([`HeaderValues::span`] says where).
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Where `value` lies in [`HeaderValues::as_bytes`]: start and length.
    #[inline]
    pub fn span(&self, value: Value) -> (usize, usize) {
        let (start, len) = self.spans[value as usize];
        (usize::from(start), usize::from(len))
    }

    /// One value's text.
    pub fn get(&self, value: Value) -> &[u8] {
        let (start, len) = self.span(value);
        &self.buf[start..start + len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(remaining: u32, reset_at_s: u64, reset_in_s: u64) -> RateLimitNumbers {
        RateLimitNumbers {
            remaining,
            reset_at_s,
            reset_in_s,
        }
    }

    #[test]
    fn values_are_what_format_writes() {
        let name = LimitName::new("pow-shield").unwrap();
        for (requests, n) in [
            (1, numbers(0, 0, 0)),
            (60, numbers(59, 1_700_000_060, 60)),
            (1_000_000, numbers(999_999, 9, 10)),
            (u32::MAX, numbers(u32::MAX, u64::MAX, u64::MAX)),
        ] {
            let v = HeaderValues::new(requests, &name, &n, (true, true));
            assert_eq!(v.get(Value::Limit), requests.to_string().as_bytes());
            assert_eq!(v.get(Value::Remaining), n.remaining.to_string().as_bytes());
            assert_eq!(v.get(Value::Reset), n.reset_at_s.to_string().as_bytes());
            let ietf = format!("\"pow-shield\";r={};t={}", n.remaining, n.reset_in_s);
            assert_eq!(v.get(Value::RateLimit), ietf.as_bytes());
        }
    }

    #[test]
    fn digits_at_every_length_are_right() {
        let name = LimitName::new("a").unwrap();
        let mut n = 1u64;
        for _ in 0..20 {
            for k in [n - 1, n, n + 1, n.saturating_mul(10) - 1] {
                let v = HeaderValues::new(0, &name, &numbers(0, k, 0), (true, false));
                assert_eq!(v.get(Value::Reset), k.to_string().as_bytes());
            }
            n = n.saturating_mul(10);
        }
    }

    #[test]
    fn the_longest_values_fit() {
        let name = LimitName::new(&"a".repeat(crate::limiter::limits::MAX_NAME)).unwrap();
        let n = numbers(u32::MAX, u64::MAX, u64::MAX);
        let v = HeaderValues::new(u32::MAX, &name, &n, (true, true));
        let ietf = format!("\"{}\";r={};t={}", name.as_str(), u32::MAX, u64::MAX);
        assert_eq!(v.get(Value::RateLimit), ietf.as_bytes());
        assert_eq!(v.get(Value::Reset), u64::MAX.to_string().as_bytes());
    }

    #[test]
    fn values_not_asked_for_are_empty() {
        let name = LimitName::new("api").unwrap();
        let n = numbers(4, 100, 5);
        let x = HeaderValues::new(5, &name, &n, (true, false));
        assert_eq!(x.get(Value::RateLimit), b"");
        assert_eq!(x.get(Value::Limit), b"5");
        assert_eq!(x.get(Value::Remaining), b"4");
        assert_eq!(x.get(Value::Reset), b"100");
        let ietf = HeaderValues::new(5, &name, &n, (false, true));
        assert_eq!(ietf.get(Value::Limit), b"");
        assert_eq!(ietf.get(Value::Reset), b"");
        assert_eq!(ietf.get(Value::Remaining), b"");
        assert_eq!(ietf.get(Value::RateLimit), b"\"api\";r=4;t=5");
    }

    #[test]
    fn an_item_made_at_configuration_gives_the_same_values() {
        use crate::limiter::RateLimit;
        let rate = |requests| RateLimit {
            requests,
            window_ms: 1000,
        };
        let plain = Limits::one(rate(60));
        let mut stacked = Limits::one(rate(1_000_000));
        let net = LimitName::new("net").ok();
        stacked.push(rate(5), net).unwrap();
        for (limits, i) in [(&plain, 0), (&stacked, 0), (&stacked, 1)] {
            let item = rate_limit_item(limits, i);
            let name = item_name(limits, i);
            assert_eq!(item, format!("\"{}\";r=", name.as_str()));
            for n in [numbers(0, 0, 0), numbers(59, 1_700_000_060, 60)] {
                for flags in [(true, true), (true, false), (false, true)] {
                    let by_name = HeaderValues::new(60, &name, &n, flags);
                    let by_item = HeaderValues::of_item(Some(60), item.as_bytes(), &n, flags);
                    assert_eq!(by_item.as_bytes(), by_name.as_bytes());
                    for v in [
                        Value::Limit,
                        Value::Remaining,
                        Value::Reset,
                        Value::RateLimit,
                    ] {
                        assert_eq!(by_item.get(v), by_name.get(v));
                    }
                    let varying = HeaderValues::of_item(None, item.as_bytes(), &n, flags);
                    let by_name = HeaderValues::varying(&name, &n, flags);
                    assert_eq!(varying.as_bytes(), by_name.as_bytes());
                }
            }
        }
    }

    #[test]
    fn varying_values_are_the_same_without_the_limit() {
        let name = LimitName::new("api").unwrap();
        let n = numbers(4, 100, 5);
        let all = HeaderValues::new(5, &name, &n, (true, true));
        let varying = HeaderValues::varying(&name, &n, (true, true));
        assert_eq!(varying.get(Value::Limit), b"");
        for v in [Value::Remaining, Value::Reset, Value::RateLimit] {
            assert_eq!(varying.get(v), all.get(v));
        }
    }

    #[test]
    fn resets_are_rounded_up_to_whole_seconds() {
        let v = Verdict {
            allowed: true,
            remaining: 59,
            reset_after_ms: 59_001,
            retry_after_ms: 0,
            over: 0,
            limit: 0,
        };
        let n = RateLimitNumbers::new(&v, 1_700_000_000_500);
        assert_eq!(n.remaining, 59);
        assert_eq!(n.reset_at_s, 1_700_000_060);
        assert_eq!(n.reset_in_s, 60);
    }

    #[test]
    fn nothing_counted_resets_now() {
        let n = RateLimitNumbers::new(&Verdict::default(), 2_000);
        assert_eq!((n.reset_at_s, n.reset_in_s), (2, 0));
    }
}

//! The scripts' replies, decoded and checked (`cluster::scripts`): every
//! integer a script returns is bounded before the module uses it, and a
//! check's or strike's reply becomes the store's answer (`store::Checked`,
//! `store::Struck`) with `struck` as the script decided it.

use crate::limiter::breaker::{Block, BreakerRules, BreakerStatus, Tripped};
use crate::limiter::{Limits, RateLimit, Verdict};
use crate::store::Spent;
use crate::store::{Checked, Offence, Struck};

/// Number of integers the sliding-window script returns.
pub const REPLY_LEN: usize = 10;

/// Most requests of one client one coalesced check decides.
pub const MAX_COALESCED: usize = 64;

/// A script reply that does not have the expected shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// Not the number of integers the script returns.
    #[error("script returned {len} integers, expected {expected}")]
    WrongLength {
        /// Integers received.
        len: usize,
        /// Integers expected.
        expected: usize,
    },
    /// A negative count or duration.
    #[error("script returned a negative value at position {index}")]
    Negative {
        /// 0-based position in the reply.
        index: usize,
    },
    /// A value that cannot be what the script computes (flag not 0/1,
    /// remaining above the limit).
    #[error("script returned an impossible value at position {index}")]
    OutOfRange {
        /// 0-based position in the reply.
        index: usize,
    },
}

/// Decodes the sliding-window script's reply for `limit`.
pub fn verdict_from_reply(
    reply: &[i64],
    limit: RateLimit,
) -> Result<(Verdict, BreakerStatus), ReplyError> {
    let [allowed, remaining, reset_after_ms, retry_after_ms, over, s, b, ms, t, _] =
        fields::<REPLY_LEN>(reply)?;
    let status = [s, b, ms, t];
    let allowed = match allowed {
        0 => false,
        1 => true,
        _ => return Err(ReplyError::OutOfRange { index: 0 }),
    };
    let remaining = u32::try_from(remaining)
        .ok()
        .filter(|r| *r <= limit.requests)
        .ok_or(ReplyError::OutOfRange { index: 1 })?;
    let verdict = Verdict {
        allowed,
        remaining,
        reset_after_ms,
        retry_after_ms,
        over: saturate(over),
        limit: 0,
    };
    Ok((verdict, breaker_status(status, 5)?))
}

/// A check's reply (the window or approx script, one request) as the
/// store's answer: the verdict, the breaker, whether the script struck (its
/// `struck`), and in a Redis Cluster (`cluster`) the slot's generation its
/// reply ends with.
pub fn checked_from_reply(
    reply: &[i64],
    limit: RateLimit,
    cluster: bool,
) -> Result<Checked, ReplyError> {
    let (reply, generation) = split_generation(reply, cluster);
    let (verdict, breaker) = verdict_from_reply(reply, limit)?;
    let [.., struck] = fields::<REPLY_LEN>(reply)?;
    let struck = match struck {
        0 => false,
        1 if !verdict.allowed && breaker.block == Block::Clear => true,
        _ => return Err(ReplyError::OutOfRange { index: 9 }),
    };
    Ok(Checked {
        verdict,
        breaker,
        struck,
        generation,
        maybe_struck: false,
    })
}

/// The limits a stacked call counts, as its reply is read: the
/// location's list ([`Limits`]), or only a part's own
/// (`calls::Part`: no copy of the location's list a part).
pub trait StackedLimits {
    /// How many.
    fn limits_len(&self) -> usize;
    /// The numbers of the `i`th.
    fn rate(&self, i: usize) -> Option<RateLimit>;
    /// Whether the `i`th counts per its own `key=` (its refusal strikes
    /// no one).
    fn is_keyed(&self, i: usize) -> bool;
}

impl StackedLimits for Limits {
    fn limits_len(&self) -> usize {
        self.len()
    }

    fn rate(&self, i: usize) -> Option<RateLimit> {
        self.get(i)
    }

    fn is_keyed(&self, i: usize) -> bool {
        Limits::is_keyed(self, i)
    }
}

/// The stacked script's reply as the store's answer. Its last integer
/// names the limit that decided, so it cannot say `struck`: the script
/// strikes a refused offence of an unblocked client when strikes are on
/// (`R.refuse` in `refusal.lua`), decided here from the same facts.
pub fn stacked_checked_from_reply(
    reply: &[i64],
    limits: &impl StackedLimits,
    offence: Offence,
    rules: BreakerRules,
    cluster: bool,
) -> Result<Checked, ReplyError> {
    let (reply, generation) = split_generation(reply, cluster);
    let (verdict, breaker) = stacked_verdict_from_reply(reply, limits)?;
    let struck = offence != Offence::None
        && !verdict.allowed
        && breaker.block == Block::Clear
        && strikes_on(rules);
    Ok(Checked {
        verdict,
        breaker,
        struck,
        generation,
        maybe_struck: false,
    })
}

/// The strike script's reply as the store's answer: it strikes unless the
/// client is blocked, when strikes are on.
pub fn struck_from_reply(reply: &[i64], rules: BreakerRules) -> Result<Struck, ReplyError> {
    let breaker = standing_from_reply(reply)?;
    Ok(Struck {
        breaker,
        struck: breaker.block == Block::Clear && strikes_on(rules),
    })
}

/// A check's own integers, and the slot's generation a Redis Cluster's
/// check answers last (0: none, the request was admitted).
pub fn split_generation(reply: &[i64], cluster: bool) -> (&[i64], Option<u64>) {
    match reply.split_last() {
        Some((gen, rest)) if cluster => (rest, u64::try_from(*gen).ok().filter(|g| *g > 0)),
        _ => (reply, None),
    }
}

/// The scripts strike with a threshold (their `ARGV` rule is 0 when off).
fn strikes_on(rules: BreakerRules) -> bool {
    rules.strikes.is_some_and(|s| s.threshold > 0)
}

/// What one call of the window script decided for `k` requests of one
/// client at once ([`coalesced_from_reply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coalesced {
    /// The first `admitted` requests are admitted.
    pub admitted: u32,
    /// Of the rest, the next `struck` are refused with a strike each;
    /// the ones after them are blocked (the breaker opened on the last
    /// strike), unless strikes are off (then all are refused).
    pub struck: u32,
    /// The window after the call (`allowed` true if any was admitted;
    /// `remaining` after the last admission, `over` after every refusal).
    pub verdict: Verdict,
    /// The breaker after the call.
    pub breaker: BreakerStatus,
}

impl Coalesced {
    /// The answer of request `i` (0-based, in arrival order) of the `k`
    /// the call decided, as `k` calls one after the other would have
    /// answered.
    pub fn nth(&self, i: u32, k: u32, rules: BreakerRules) -> Checked {
        let b = self.breaker;
        if b.block != Block::Clear {
            return Checked {
                breaker: b,
                ..Checked::default()
            };
        }
        let before = b.strikes.saturating_sub(self.struck);
        let threshold = rules.strikes.map_or(0, |s| s.threshold);
        // With strikes on, those after the strike that opened the breaker
        // are blocked: neither struck nor counted as refusals.
        let refused = k.saturating_sub(self.admitted);
        let counted = if threshold > 0 { self.struck } else { refused };
        if i < self.admitted {
            let remaining = self.verdict.remaining + (self.admitted - 1 - i);
            // The refusals before this call's, where the next challenge is
            // priced from them (none left after this one).
            let over = match remaining {
                0 => self.verdict.over.saturating_sub(counted),
                _ => 0,
            };
            return Checked {
                verdict: Verdict {
                    allowed: true,
                    remaining,
                    retry_after_ms: 0,
                    over,
                    ..self.verdict
                },
                breaker: BreakerStatus {
                    strikes: before,
                    ..BreakerStatus::default()
                },
                ..Checked::default()
            };
        }
        let j = i - self.admitted;
        let over = self
            .verdict
            .over
            .saturating_sub(counted)
            .saturating_add(j + 1);
        let verdict = Verdict {
            allowed: false,
            remaining: 0,
            over,
            ..self.verdict
        };
        if threshold == 0 || j < self.struck {
            let struck = j < self.struck;
            // The strike that opened the breaker says how long it stays open.
            let tripping = struck && j + 1 == self.struck && b.tripped.is_some();
            return Checked {
                verdict,
                breaker: BreakerStatus {
                    strikes: if struck { before + j + 1 } else { b.strikes },
                    tripped: b.tripped.filter(|_| tripping),
                    block_ms: if tripping { b.block_ms } else { 0 },
                    ..BreakerStatus::default()
                },
                struck,
                ..Checked::default()
            };
        }
        // After the strike that opened the breaker: blocked.
        let opened = BreakerStatus {
            tripped: b.tripped.or(Some(Tripped::Opened)),
            ..b
        };
        Checked {
            breaker: crate::limiter::breaker::opened_block(&opened, rules).unwrap_or(b),
            ..Checked::default()
        }
    }
}

/// Decodes the window script's reply to a call for `k` requests.
pub fn coalesced_from_reply(
    reply: &[i64],
    limit: RateLimit,
    k: u32,
) -> Result<Coalesced, ReplyError> {
    let [admitted, remaining, reset_after_ms, retry_after_ms, over, s, b, ms, t, struck] =
        fields::<REPLY_LEN>(reply)?;
    let admitted = u32::try_from(admitted)
        .ok()
        .filter(|a| *a <= k)
        .ok_or(ReplyError::OutOfRange { index: 0 })?;
    // What the call admitted came out of the limit: what remains after it
    // is at most the rest (a peer answering more would make each request's
    // share report more than the limit).
    let remaining = u32::try_from(remaining)
        .ok()
        .filter(|r| u64::from(*r) + u64::from(admitted) <= u64::from(limit.requests))
        .ok_or(ReplyError::OutOfRange { index: 1 })?;
    let struck = u32::try_from(struck)
        .ok()
        .filter(|s| *s <= k - admitted)
        .ok_or(ReplyError::OutOfRange { index: 9 })?;
    Ok(Coalesced {
        admitted,
        struck,
        verdict: Verdict {
            allowed: admitted > 0,
            remaining,
            reset_after_ms,
            retry_after_ms,
            over: saturate(over),
            limit: 0,
        },
        breaker: breaker_status([s, b, ms, t], 5)?,
    })
}

/// Decodes the strike script's reply.
pub fn standing_from_reply(reply: &[i64]) -> Result<BreakerStatus, ReplyError> {
    breaker_status(fields::<4>(reply)?, 0)
}

/// Decodes the spend script's reply.
pub fn spent_from_reply(reply: &[i64]) -> Result<Spent, ReplyError> {
    let [spent, strikes, block, block_ms] = fields::<4>(reply)?;
    match spent {
        0 => Ok(Spent::Replayed),
        1 => Ok(Spent::Accepted(breaker_status([strikes, 0, 0, 0], 1)?)),
        2 => match breaker_status([strikes, block, block_ms, 0], 1)? {
            breaker if breaker.block != Block::Clear => Ok(Spent::Blocked(breaker)),
            _ => Err(ReplyError::OutOfRange { index: 2 }),
        },
        _ => Err(ReplyError::OutOfRange { index: 0 }),
    }
}

/// Decodes the batch script's reply: the refusals Redis counts in the
/// window and the client's breaker after the batch.
pub fn batch_from_reply(reply: &[i64]) -> Result<(u32, BreakerStatus), ReplyError> {
    let [over, status @ ..] = fields::<5>(reply)?;
    Ok((saturate(over), breaker_status(status, 1)?))
}

/// The integers of the batch script's reply (a bulk string of decimal
/// integers separated by spaces); `None` if it is anything else.
pub fn batch_text(text: &[u8]) -> Option<Vec<i64>> {
    core::str::from_utf8(text)
        .ok()?
        .split(' ')
        .map(|n| n.parse().ok())
        .collect()
}

/// Decodes the batch script's reply for `clients` clients, in order.
pub fn batches_from_reply(
    reply: &[i64],
    clients: usize,
) -> Result<Vec<(u32, BreakerStatus)>, ReplyError> {
    if reply.len() != 5 * clients {
        return Err(ReplyError::WrongLength {
            len: reply.len(),
            expected: 5 * clients,
        });
    }
    reply.chunks(5).map(batch_from_reply).collect()
}

/// `{strikes, block, block_ms, tripped}`, found at position `at` of a reply.
fn breaker_status(
    [strikes, block, block_ms, tripped]: [u64; 4],
    at: usize,
) -> Result<BreakerStatus, ReplyError> {
    let block = match block {
        0 => Block::Clear,
        1 => Block::Blocked,
        2 => Block::Banned,
        _ => return Err(ReplyError::OutOfRange { index: at + 1 }),
    };
    let tripped = match tripped {
        0 => None,
        1 => Some(Tripped::Opened),
        2 => Some(Tripped::Banned),
        _ => return Err(ReplyError::OutOfRange { index: at + 3 }),
    };
    Ok(BreakerStatus {
        strikes: saturate(strikes),
        block,
        block_ms,
        tripped,
    })
}

fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The reply as `N` non-negative integers.
fn fields<const N: usize>(reply: &[i64]) -> Result<[u64; N], ReplyError> {
    let reply: &[i64; N] = reply.try_into().map_err(|_| ReplyError::WrongLength {
        len: reply.len(),
        expected: N,
    })?;
    let mut out = [0u64; N];
    for (index, (dst, src)) in out.iter_mut().zip(reply).enumerate() {
        *dst = u64::try_from(*src).map_err(|_| ReplyError::Negative { index })?;
    }
    Ok(out)
}

/// Of the one-limit scripts' reply, the integers the stacked script
/// returns (all but the last, `struck`).
pub const ONE_LIMIT: usize = REPLY_LEN - 1;

/// Integers the stacked script returns (one Redis's).
pub const STACKED_REPLY_LEN: usize = ONE_LIMIT + 1;

/// Decodes the stacked script's reply for `limits`: the verdict of the
/// limit that decided, which `Verdict::limit` names.
pub fn stacked_verdict_from_reply(
    reply: &[i64],
    limits: &impl StackedLimits,
) -> Result<(Verdict, BreakerStatus), ReplyError> {
    let [.., at] = fields::<STACKED_REPLY_LEN>(reply)?;
    let index = STACKED_REPLY_LEN - 1;
    let at = u8::try_from(at).map_err(|_| ReplyError::OutOfRange { index })?;
    let limit = limits
        .rate(usize::from(at))
        .ok_or(ReplyError::OutOfRange { index })?;
    let mut one = [0i64; REPLY_LEN];
    one[..ONE_LIMIT].copy_from_slice(&reply[..ONE_LIMIT]);
    let (mut verdict, breaker) = verdict_from_reply(&one, limit)?;
    verdict.limit = at;
    Ok((verdict, breaker))
}

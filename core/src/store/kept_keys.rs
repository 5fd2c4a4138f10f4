//! A request's keys kept past the request (the module's fallback record
//! of a call to Redis: the request's memory may be gone when the call
//! fails).

use super::Subject;
use crate::limiter::MAX_LIMITS;

/// A request's client key and its limits' `key=` values, copied one
/// after the other into one buffer: inline when they are short (an
/// address and its network: some 30 bytes), else in one allocation
/// (measured: a copy each made a Redis request's fallback record four
/// allocations).
pub struct KeptKeys {
    bytes: KeyBytes,
    /// The client key is `bytes[..key_len]`.
    key_len: usize,
    /// Where each limit's `key=` value is in `bytes` (`None`: the limit
    /// counts per client key).
    values: [Option<(u32, u32)>; MAX_LIMITS],
    /// How many limits the request has values for.
    limits: usize,
}

/// [`KeptKeys`]'s bytes.
enum KeyBytes {
    Inline { len: u8, bytes: [u8; INLINE_KEYS] },
    Heap(Vec<u8>),
}

/// Bytes of keys kept without an allocation.
const INLINE_KEYS: usize = 48;

impl KeptKeys {
    /// The subject's key and `key=` values, copied.
    pub fn of(subject: &Subject) -> Self {
        let mut kept = KeptKeys {
            bytes: KeyBytes::Inline {
                len: 0,
                bytes: [0; INLINE_KEYS],
            },
            key_len: 0,
            values: [None; MAX_LIMITS],
            limits: 0,
        };
        kept.write(subject);
        kept
    }

    /// [`KeptKeys::of`] `subject`, written over these in place (a kept
    /// record made again for the next request: nothing made aside and
    /// moved in; inline bytes stay inline, without an allocation).
    pub fn write(&mut self, subject: &Subject) {
        let limits = subject.key_values.len().min(MAX_LIMITS);
        let kept = &subject.key_values[..limits];
        let len = subject.key.len() + kept.iter().flatten().map(|v| v.len()).sum::<usize>();
        match (&mut self.bytes, len <= INLINE_KEYS) {
            (KeyBytes::Inline { len: n, .. }, true) => *n = len as u8,
            (bytes, true) => {
                *bytes = KeyBytes::Inline {
                    len: len as u8,
                    bytes: [0; INLINE_KEYS],
                }
            }
            (bytes, false) => *bytes = KeyBytes::Heap(vec![0; len]),
        }
        let out: &mut [u8] = match &mut self.bytes {
            KeyBytes::Inline { bytes, .. } => bytes.get_mut(..len).unwrap_or_default(),
            KeyBytes::Heap(bytes) => bytes,
        };
        let Some((key, rest)) = out.split_at_mut_checked(subject.key.len()) else {
            return;
        };
        key.copy_from_slice(subject.key);
        let mut at = 0;
        for (slot, value) in self.values.iter_mut().zip(kept) {
            *slot = value.and_then(|value| {
                let room = rest.get_mut(at..at + value.len())?;
                room.copy_from_slice(value);
                let from = subject.key.len() + at;
                at += value.len();
                // (Never past 4 GiB: an nginx variable's value is under
                // 256 MiB, its length a 28-bit field.)
                Some((
                    u32::try_from(from).ok()?,
                    u32::try_from(from + value.len()).ok()?,
                ))
            });
        }
        for slot in self.values.iter_mut().skip(limits) {
            *slot = None;
        }
        self.key_len = subject.key.len();
        self.limits = limits;
    }

    /// How many limits the request has values for.
    pub fn limits(&self) -> usize {
        self.limits
    }

    fn bytes(&self) -> &[u8] {
        match &self.bytes {
            KeyBytes::Inline { len, bytes } => &bytes[..usize::from(*len)],
            KeyBytes::Heap(bytes) => bytes,
        }
    }

    /// The client key.
    pub fn key(&self) -> &[u8] {
        self.bytes().get(..self.key_len).unwrap_or_default()
    }

    /// The `key=` values by limit, as a `Subject` takes them (the first
    /// [`KeptKeys::limits`]).
    pub fn values(&self) -> [Option<&[u8]>; MAX_LIMITS] {
        let bytes = self.bytes();
        self.values.map(|value| {
            value.map(|(from, to)| bytes.get(from as usize..to as usize).unwrap_or_default())
        })
    }
}

#[cfg(test)]
mod tests;

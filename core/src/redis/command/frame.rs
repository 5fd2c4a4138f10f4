//! A reply as the pipeline hands it on: a script's integers in a box of
//! their own, which goes back to the connection once the reply is read
//! (the usual reply: read without a frame an element or an allocation),
//! any other reply of ours as `redis-protocol` makes it.

use std::borrow::Cow;

use redis_protocol::resp2::types::OwnedFrame;

use super::MAX_ELEMENTS;
use crate::redis::clock;

/// A reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// An array of integers (a script's answer), of at most
    /// [`MAX_ELEMENTS`]: every such reply, whichever way it was read.
    /// (Boxed: a reply is moved from the decoder to the read's list
    /// through several types, each move of the integers inline a copy of
    /// them; measured, the five cost more than an allocation.)
    Integers(Box<Ints>),
    /// Any other reply.
    Other(OwnedFrame),
}

/// Any reply, an array of at most [`MAX_ELEMENTS`] integers held as
/// [`Frame::Integers`] (as the decoder reads it).
impl From<OwnedFrame> for Frame {
    fn from(frame: OwnedFrame) -> Frame {
        let ints = match &frame {
            OwnedFrame::Array(items) if items.len() <= MAX_ELEMENTS => {
                let mut ints = Ints::default();
                for (slot, item) in ints.ints.iter_mut().zip(items) {
                    let OwnedFrame::Integer(i) = item else {
                        return Frame::Other(frame);
                    };
                    *slot = *i;
                }
                ints.len = items.len() as u8;
                ints
            }
            _ => return Frame::Other(frame),
        };
        Frame::Integers(Box::new(ints))
    }
}

impl Frame {
    /// The reply as `redis-protocol` makes it (an array of integers made
    /// again: for the rare replies read as such, a subscription's).
    pub fn into_owned(self) -> OwnedFrame {
        match self {
            Frame::Integers(ints) => integers_frame(&ints),
            Frame::Other(frame) => frame,
        }
    }

    /// The reply as `redis-protocol` makes it, borrowed where it is one
    /// already (for the rare replies read as such: the handshake's, the
    /// cluster map, a sentinel's answer).
    pub fn as_owned(&self) -> Cow<'_, OwnedFrame> {
        match self {
            Frame::Integers(ints) => Cow::Owned(integers_frame(ints)),
            Frame::Other(frame) => Cow::Borrowed(frame),
        }
    }

    /// Its integers, if it is an array of them.
    pub fn integers(&self) -> Option<&[i64]> {
        match self {
            Frame::Integers(ints) => Some(ints),
            Frame::Other(_) => None,
        }
    }

    /// Any reply but an array of integers.
    pub fn other(&self) -> Option<&OwnedFrame> {
        match self {
            Frame::Integers(_) => None,
            Frame::Other(frame) => Some(frame),
        }
    }

    /// A bulk string's bytes, if it is one (a gathered call's answers).
    pub fn bulk_string(&self) -> Option<&[u8]> {
        match self {
            Frame::Other(OwnedFrame::BulkString(bytes)) => Some(bytes),
            _ => None,
        }
    }

    /// Redis's clock in a script's "expired" reply, if it is one
    /// (`clock::expired_ms`).
    pub fn expired_ms(&self) -> Option<u64> {
        self.other().and_then(clock::expired_ms)
    }
}

/// `ints` as `redis-protocol` makes an array of integers.
fn integers_frame(ints: &[i64]) -> OwnedFrame {
    OwnedFrame::Array(ints.iter().copied().map(OwnedFrame::Integer).collect())
}

/// A script's integers, kept inline: no reply of ours has more than
/// [`MAX_ELEMENTS`] (the decoder refuses a longer array).
#[derive(Clone, Copy, Default)]
pub struct Ints {
    pub(super) len: u8,
    /// (After the first `len`: zero, or a reply's read before.)
    pub(super) ints: [i64; MAX_ELEMENTS],
}

/// The same integers.
impl PartialEq for Ints {
    fn eq(&self, other: &Ints) -> bool {
        **self == **other
    }
}

impl Eq for Ints {}

impl Ints {
    /// `ints`, if there are at most [`MAX_ELEMENTS`] of them.
    pub fn of(ints: &[i64]) -> Option<Ints> {
        let mut out = Ints::default();
        out.ints.get_mut(..ints.len())?.copy_from_slice(ints);
        out.len = ints.len() as u8;
        Some(out)
    }
}

impl core::ops::Deref for Ints {
    type Target = [i64];
    fn deref(&self) -> &[i64] {
        self.ints.get(..usize::from(self.len)).unwrap_or_default()
    }
}

impl core::fmt::Debug for Ints {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Boxes of script answers already read ([`Rooms::give_back`]): the next
/// answers are read into them (measured: an allocation and a free a
/// reply).
#[derive(Default)]
// (The boxes themselves are what is kept: each goes out in a reply whole.)
#[allow(clippy::vec_box)]
pub struct Rooms(Vec<Box<Ints>>);

/// Most boxes kept (a read of this many answers at once allocates none
/// the next time).
const KEPT_ROOMS: usize = 64;

impl Rooms {
    /// A box for an answer: one given back, or a new one.
    pub(super) fn take(&mut self) -> Box<Ints> {
        self.0.pop().unwrap_or_default()
    }

    /// `room` serves a later answer (up to [`KEPT_ROOMS`] are kept).
    pub(super) fn keep(&mut self, room: Box<Ints>) {
        if self.0.len() < KEPT_ROOMS {
            self.0.push(room);
        }
    }

    /// A reply read: its box, if it has one, serves a later answer.
    pub fn give_back(&mut self, frame: Frame) {
        if let Frame::Integers(room) = frame {
            self.keep(room);
        }
    }
}

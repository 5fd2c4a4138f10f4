//! A call's buffer once Redis answered the call: the next call is written
//! in it (measured: its allocation and free were some 140 instructions a
//! request in cluster mode).

use core::cell::Cell;

use super::CALL_CAPACITY;

thread_local! {
    /// The buffer given back last, emptied ([`give_back`]). One a worker:
    /// calls are made one at a time.
    static SPARE: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// `cmd`, the buffer of a call no longer needed, holds the next call (the
/// one kept before it is freed; a large one, a batch's, is freed).
pub fn give_back(mut cmd: Vec<u8>) {
    if cmd.capacity() <= 4 * CALL_CAPACITY {
        cmd.clear();
        SPARE.set(cmd);
    }
}

/// The buffer given back last, or none (empty either way).
pub(super) fn take() -> Vec<u8> {
    SPARE.take()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_is_the_next_one_taken_emptied_and_a_large_one_is_not_kept() {
        let mut buf = Vec::with_capacity(CALL_CAPACITY);
        buf.extend_from_slice(b"*3\r\n");
        let at = buf.as_ptr();
        give_back(buf);
        let again = take();
        assert_eq!((again.as_ptr(), again.len()), (at, 0));
        assert_eq!(take().capacity(), 0, "taken once");
        give_back(Vec::with_capacity(8 * CALL_CAPACITY));
        assert_eq!(take().capacity(), 0, "a batch's buffer is freed");
    }
}

//! Decimal digits written right to left, two at a time: what every
//! number of a call, a key's limit and a call's deadline are made of
//! (apart from `script_call`, which uses `clock`: `clock` uses these).

/// The two digits of every number below 100, for two at a time.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Writes `n`'s decimal digits to end just before `end` in `buf` (room
/// for 20 at most); where they start. Two digits a step (measured: most of
/// a key's or a number's encoding went into the digits one by one).
pub(crate) fn digits_before(buf: &mut [u8], end: usize, mut n: u64) -> usize {
    let mut at = end;
    while n >= 10 {
        let pair = 2 * (n % 100) as usize;
        n /= 100;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        if n == 0 {
            // (The last pair was 10..=99: no leading 0.)
            return at;
        }
    }
    at -= 1;
    buf[at] = b'0' + n as u8;
    at
}

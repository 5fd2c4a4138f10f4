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
/// a key's or a number's encoding went into the digits one by one; four a
/// step cost more, the call no longer inlined where it is used).
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

/// `n`'s last `N` decimal digits, zeros before them if it has fewer: a
/// pair a step, as many steps whatever `n` (a call's deadline, 13 digits).
#[inline]
pub(crate) fn padded<const N: usize>(mut n: u64) -> [u8; N] {
    let mut out = [b'0'; N];
    let mut at = N;
    while at >= 2 {
        let pair = 2 * (n % 100) as usize;
        n /= 100;
        at -= 2;
        out[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if let Some(first) = out.get_mut(at.wrapping_sub(1)) {
        *first = b'0' + (n % 10) as u8;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_digits_are_the_last_n_with_zeros_before() {
        for n in [
            0,
            7,
            42,
            1_000,
            999_999_999_999,
            1_765_000_000_123,
            9_999_999_999_999,
        ] {
            assert_eq!(padded::<13>(n), *format!("{n:013}").as_bytes(), "{n}");
            let even = format!("{:012}", n % 1_000_000_000_000);
            assert_eq!(padded::<12>(n), *even.as_bytes(), "{n}");
        }
    }

    #[test]
    fn every_number_is_its_decimal_digits_at_the_end_without_leading_zeros() {
        // Either side of each length (a pair a step: odd and even counts
        // of digits), a deadline's 13, and the largest.
        let tens = (0..20).map(|e| 10u64.pow(e));
        let near = tens.flat_map(|t| [t - 1, t, t + 1, t.saturating_mul(3) - 1]);
        for n in near.chain([u64::MAX, 1_765_000_000_123, 10_000_100, 100_010]) {
            let mut buf = [b'x'; 24];
            let at = digits_before(&mut buf, 22, n);
            assert_eq!(&buf[at..22], n.to_string().as_bytes(), "{n}");
            assert!(buf[..at].iter().chain(&buf[22..]).all(|&b| b == b'x'));
        }
    }
}

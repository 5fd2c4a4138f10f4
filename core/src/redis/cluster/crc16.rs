//! The Redis Cluster key hash: CRC16-CCITT (XMODEM), polynomial 0x1021,
//! initial value 0, as the Redis Cluster specification defines it.
//!
//! Eight bytes a step by eight tables (each byte's part in the register
//! eight, seven, .., one byte before the end), the rest a byte at a time:
//! measured, every request hashes a tag or two, and a byte at a time cost
//! some 13 instructions a byte (a bit at a time some 40).

/// The CRC16 of `data`.
pub fn crc16(data: &[u8]) -> u16 {
    let (mut crc, mut rest) = (0, data);
    while let Some((word, after)) = rest.split_first_chunk::<8>() {
        crc = word_step(crc, u64::from_be_bytes(*word));
        rest = after;
    }
    rest.iter().fold(crc, |crc, &b| byte(crc, b))
}

/// `crc` carried over the eight-byte words of `data` up to the first
/// that holds a brace (`{` or `}`), and what is left of `data` from that
/// word (or the last bytes, short of a word).
#[inline]
pub(super) fn words_to_brace(mut crc: u16, data: &[u8]) -> (u16, &[u8]) {
    let mut rest = data;
    while let Some((word, after)) = rest.split_first_chunk::<8>() {
        let word = u64::from_be_bytes(*word);
        if has_byte(word, b'{') || has_byte(word, b'}') {
            break;
        }
        crc = word_step(crc, word);
        rest = after;
    }
    (crc, rest)
}

/// `crc` carried over one byte.
#[inline(always)]
pub(super) fn byte(crc: u16, byte: u8) -> u16 {
    (crc << 8) ^ TABLES[0][usize::from((crc >> 8) as u8 ^ byte)]
}

/// `crc` carried over eight bytes (`word`, big-endian: its first byte
/// the highest). The register meets the first two bytes; each byte's
/// part then comes from its table, the first's from the eighth.
#[inline(always)]
fn word_step(crc: u16, word: u64) -> u16 {
    let w = word ^ (u64::from(crc) << 48);
    let at = |shift: u32| usize::from((w >> shift) as u8);
    TABLES[7][at(56)]
        ^ TABLES[6][at(48)]
        ^ TABLES[5][at(40)]
        ^ TABLES[4][at(32)]
        ^ TABLES[3][at(24)]
        ^ TABLES[2][at(16)]
        ^ TABLES[1][at(8)]
        ^ TABLES[0][at(0)]
}

/// Whether a byte of `word` is `b` (a zero byte of `word ^ b…b`: its
/// borrow reaches the high bit of that byte only there, and any byte
/// above it matters no more once one is found).
#[inline(always)]
fn has_byte(word: u64, b: u8) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let x = word ^ (ONES * u64::from(b));
    x.wrapping_sub(ONES) & !x & HIGHS != 0
}

/// `TABLES[k][b]`: the register after byte `b` at its top followed by `k`
/// zero bytes (`TABLES[0]`: eight steps of the polynomial).
const TABLES: [[u16; 256]; 8] = {
    let mut tables = [[0u16; 256]; 8];
    let mut b = 0;
    while b < 256 {
        let mut crc = (b as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = match crc & 0x8000 {
                0 => crc << 1,
                _ => (crc << 1) ^ 0x1021,
            };
            bit += 1;
        }
        tables[0][b] = crc;
        b += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut b = 0;
        while b < 256 {
            let before = tables[k - 1][b];
            tables[k][b] = (before << 8) ^ tables[0][(before >> 8) as usize];
            b += 1;
        }
        k += 1;
    }
    tables
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The polynomial a bit at a time, as the specification writes it.
    fn bitwise(data: &[u8]) -> u16 {
        let mut crc: u16 = 0;
        for &byte in data {
            crc ^= u16::from(byte) << 8;
            for _ in 0..8 {
                crc = match crc & 0x8000 {
                    0 => crc << 1,
                    _ => (crc << 1) ^ 0x1021,
                };
            }
        }
        crc
    }

    #[test]
    fn eight_bytes_a_step_hash_as_the_polynomial_a_bit_at_a_time() {
        // Redis Cluster specification, appendix A.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let data: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for start in 0..64 {
            for len in 0..200 {
                let bytes = &data[start * 61..start * 61 + len];
                assert_eq!(crc16(bytes), bitwise(bytes), "{start} {len}");
            }
        }
    }

    #[test]
    fn words_stop_at_the_first_holding_a_brace() {
        // (data, bytes hashed by words)
        let table: &[(&[u8], usize)] = &[
            (b"", 0),
            (b"1234567", 0),
            (b"12345678", 8),
            (b"1234567}", 0),
            (b"{2345678", 0),
            (b"12345678abcdefg{", 8),
            (b"12345678abcdefgh}", 16),
            (b"@key=203.0.113.0/24}{@203.0.113.7", 16),
            (b"zzzzzzzz||||||||yyyyyyyy", 24),
        ];
        for &(data, words) in table {
            let (crc, rest) = words_to_brace(0, data);
            assert_eq!(rest, &data[words..], "{data:?}");
            assert_eq!(crc, bitwise(&data[..words]), "{data:?}");
        }
        // Every byte but the braces passes, at every place in a word.
        for b in 0..=255u8 {
            for at in 0..8 {
                let mut word = *b"abcdefgh";
                word[at] = b;
                let brace = b == b'{' || b == b'}';
                assert_eq!(words_to_brace(0, &word).1.is_empty(), !brace, "{b} {at}");
            }
        }
    }
}

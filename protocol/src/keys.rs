//! HMAC keys for challenge tokens: loading, generation, rotation.

use core::fmt;

use sha2::digest::generic_array::GenericArray;
use sha2::{compress256, Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// HMAC-SHA256 as used for token signatures (the reference the keyed
/// states are tested against).
#[cfg(test)]
pub(crate) type HmacSha256 = hmac::Hmac<Sha256>;

/// Length of an HMAC-SHA256 tag.
pub(crate) const TAG_LEN: usize = 32;

/// Fewest key bytes accepted (docs/directives.md, `pow_shield_secret`).
pub const MIN_SECRET_LEN: usize = 32;

/// SHA-256's block size: HMAC keys are normalised to one block.
const BLOCK_LEN: usize = 64;

/// SHA-256's output size: keys longer than a block are hashed to this.
const DIGEST_LEN: usize = 32;

/// Why a key or a key file was refused. Messages name the line and length,
/// never the key bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A key shorter than [`MIN_SECRET_LEN`] bytes.
    #[error("key is {len} bytes long, at least 32 are required")]
    TooShort {
        /// Length of the refused key in bytes.
        len: usize,
    },
    /// A secret file with no key at all.
    #[error("secret file is empty, expected one key per line (current, then previous)")]
    EmptyFile,
    /// An empty line in a secret file (line numbers start at 1).
    #[error("line {line} of the secret file is empty")]
    BlankLine {
        /// 1-based line number.
        line: usize,
    },
    /// A key line shorter than [`MIN_SECRET_LEN`] bytes (line numbers start at 1).
    #[error("line {line} of the secret file is a {len}-byte key, at least 32 bytes are required")]
    LineTooShort {
        /// 1-based line number.
        line: usize,
        /// Length of that line's key in bytes (without the line ending).
        len: usize,
    },
    /// More than two lines in a secret file.
    #[error(
        "secret file has {lines} lines, expected one (current key) or two (current, previous)"
    )]
    TooManyLines {
        /// Number of lines found.
        lines: usize,
    },
}

/// The operating system's random number generator failed.
#[derive(Debug, thiserror::Error)]
#[error("operating system random number generator failed: {0}")]
pub struct RandomError(getrandom::Error);

/// Fills `buf` from the OS CSPRNG.
pub(crate) fn fill_random(buf: &mut [u8]) -> Result<(), RandomError> {
    getrandom::getrandom(buf).map_err(RandomError)
}

/// Salts drawn per refill of a thread's pool: one `getrandom` call serves
/// this many challenges (a call costs more than signing a token).
const POOLED_SALTS: usize = 64;

std::thread_local! {
    /// OS random bytes not yet handed out, and how many are left (from the
    /// end); bytes handed out are wiped.
    static POOL: core::cell::RefCell<([u8; 16 * POOLED_SALTS], usize)> =
        const { core::cell::RefCell::new(([0; 16 * POOLED_SALTS], 0)) };
}

/// Fills `salt` with OS random bytes from this thread's pool, refilled
/// from the OS CSPRNG when empty. A process that forks after drawing from
/// it must call [`forget_random`] in the child, or parent and child would
/// hand out the same salts.
pub(crate) fn pooled_random(salt: &mut [u8; 16]) -> Result<(), RandomError> {
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        let (bytes, left) = &mut *pool;
        if *left < salt.len() {
            fill_random(bytes)?;
            *left = bytes.len();
        }
        let from = *left - salt.len();
        salt.copy_from_slice(&bytes[from..*left]);
        bytes[from..*left].fill(0);
        *left = from;
        Ok(())
    })
}

/// Drops this thread's pool of random bytes: the next salt comes fresh
/// from the OS (a worker process calls it once after the fork).
pub fn forget_random() {
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        pool.0.fill(0);
        pool.1 = 0;
    });
}

/// An HMAC-SHA256 key of at least 32 bytes, wiped from memory on drop.
///
/// Holds HMAC's keyed states (RFC 2104 §2): SHA-256 after the inner and
/// after the outer padded key block, computed once from the key
/// zero-padded to 64 bytes (hashed first when longer), so a MAC hashes
/// the message and the inner hash only, never the key blocks again. The
/// tags are those of keying with the original bytes.
#[derive(Clone)]
pub struct Secret {
    inner: Zeroizing<[u32; 8]>,
    outer: Zeroizing<[u32; 8]>,
}

impl Secret {
    /// A key from raw bytes; refuses keys shorter than 32 bytes.
    pub fn new(bytes: &[u8]) -> Result<Secret, KeyError> {
        if bytes.len() < MIN_SECRET_LEN {
            return Err(KeyError::TooShort { len: bytes.len() });
        }
        let mut block = Zeroizing::new([0u8; BLOCK_LEN]);
        if let Some(prefix) = block.get_mut(..bytes.len()) {
            prefix.copy_from_slice(bytes);
        } else if let Some(prefix) = block.get_mut(..DIGEST_LEN) {
            // Written in place so no unwiped copy of the hashed key remains.
            Sha256::new_with_prefix(bytes)
                .finalize_into(sha2::digest::Output::<Sha256>::from_mut_slice(prefix));
        }
        let keyed = |pad: u8| {
            let mut padded = Zeroizing::new(*block);
            padded.iter_mut().for_each(|b| *b ^= pad);
            let mut state = Zeroizing::new(crate::search::IV);
            compress256(
                &mut state,
                core::slice::from_ref(GenericArray::from_slice(&padded[..])),
            );
            state
        };
        Ok(Secret {
            inner: keyed(0x36),
            outer: keyed(0x5c),
        })
    }

    /// HMAC-SHA256 of `message` under this key.
    pub(crate) fn tag(&self, message: &[u8]) -> [u8; TAG_LEN] {
        let inner = finish(*self.inner, message);
        finish(*self.outer, &inner)
    }

    /// Whether `tag` is this key's tag of `message`, compared in constant
    /// time.
    pub(crate) fn verifies(&self, message: &[u8], tag: &[u8]) -> bool {
        self.tag(message).ct_eq(tag).into()
    }
}

/// SHA-256 of one key block (already in `state`) followed by `message`.
fn finish(mut state: [u32; 8], message: &[u8]) -> [u8; DIGEST_LEN] {
    let blocks = message.chunks_exact(BLOCK_LEN);
    let rest = blocks.remainder();
    for block in blocks {
        compress256(
            &mut state,
            core::slice::from_ref(GenericArray::from_slice(block)),
        );
    }
    // The padding: 0x80, zeros, the length in bits of key block and
    // message; one more block when the length does not fit after the rest.
    let mut tail = [0u8; 2 * BLOCK_LEN];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    let end = if rest.len() < BLOCK_LEN - 8 {
        BLOCK_LEN
    } else {
        2 * BLOCK_LEN
    };
    let bits = (BLOCK_LEN as u64 + message.len() as u64) * 8;
    tail[end - 8..end].copy_from_slice(&bits.to_be_bytes());
    for block in tail[..end].chunks_exact(BLOCK_LEN) {
        compress256(
            &mut state,
            core::slice::from_ref(GenericArray::from_slice(block)),
        );
    }
    let mut out = [0u8; DIGEST_LEN];
    for (bytes, word) in out.chunks_exact_mut(4).zip(state) {
        bytes.copy_from_slice(&word.to_be_bytes());
    }
    out
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// The signing key and, during a rotation, the previous key still accepted
/// for verification.
#[derive(Clone, Debug)]
pub struct SecretKeys {
    /// Signs new challenges; tried first on verification.
    pub current: Secret,
    /// Accepted for verification only, until challenges it signed expire.
    pub previous: Option<Secret>,
}

impl SecretKeys {
    /// Keys from a `pow_shield_secret_file`: one or two non-empty lines
    /// (current key, then previous key), each at least 32 bytes. One final
    /// newline is allowed and `\r\n` endings are accepted; bytes within a line
    /// (spaces included) are key material.
    pub fn from_file_contents(bytes: &[u8]) -> Result<SecretKeys, KeyError> {
        let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        if body.is_empty() || body == b"\r" {
            return Err(KeyError::EmptyFile);
        }
        let lines = body.split(|b| *b == b'\n').count();
        if lines > 2 {
            return Err(KeyError::TooManyLines { lines });
        }
        let mut keys = body
            .split(|b| *b == b'\n')
            .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
            .enumerate()
            .map(|(index, line)| {
                let line_no = index + 1;
                match Secret::new(line) {
                    Ok(secret) => Ok(secret),
                    Err(_) if line.is_empty() => Err(KeyError::BlankLine { line: line_no }),
                    Err(_) => Err(KeyError::LineTooShort {
                        line: line_no,
                        len: line.len(),
                    }),
                }
            });
        let current = keys.next().ok_or(KeyError::EmptyFile)??;
        let previous = keys.next().transpose()?;
        Ok(SecretKeys { current, previous })
    }

    /// A single key with no previous key.
    pub fn single(current: Secret) -> SecretKeys {
        SecretKeys {
            current,
            previous: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmac::Mac;

    #[test]
    fn pooled_salts_never_repeat_across_refills_and_forgetting() {
        let mut seen = std::collections::HashSet::new();
        for n in 0..3 * POOLED_SALTS {
            if n == POOLED_SALTS + 3 {
                forget_random();
            }
            let mut salt = [0u8; 16];
            pooled_random(&mut salt).expect("OS RNG");
            assert!(seen.insert(salt), "salt {n} repeated");
        }
    }

    #[test]
    fn a_salt_handed_out_is_wiped_from_the_pool() {
        forget_random();
        let mut salt = [0u8; 16];
        pooled_random(&mut salt).expect("OS RNG");
        POOL.with(|pool| {
            let pool = pool.borrow();
            assert_eq!(pool.1, 16 * (POOLED_SALTS - 1));
            assert!(pool.0[pool.1..].iter().all(|&b| b == 0));
        });
    }

    const KEY_A: &[u8] = b"0123456789abcdef0123456789abcdef";
    const KEY_B: &[u8] = b"fedcba9876543210fedcba9876543210";

    fn tag(secret: &Secret, msg: &[u8]) -> Vec<u8> {
        secret.tag(msg).to_vec()
    }

    fn reference_tag(key: &[u8], msg: &[u8]) -> Vec<u8> {
        let mut mac = <HmacSha256 as hmac::digest::KeyInit>::new_from_slice(key).unwrap();
        mac.update(msg);
        mac.finalize().into_bytes().to_vec()
    }

    #[test]
    fn keyed_states_give_the_rfc_2104_mac_for_every_padding_case() {
        // 0..=200 bytes: messages whose padding fits in their last block,
        // needs one more (55/56, 119/120), or fills whole blocks (64, 128).
        let key: Vec<u8> = (0..40).map(|i| i as u8 ^ 0xa5).collect();
        let secret = Secret::new(&key).unwrap();
        for len in 0..=200usize {
            let msg: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            assert_eq!(tag(&secret, &msg), reference_tag(&key, &msg), "{len}");
            let good = reference_tag(&key, &msg);
            assert!(secret.verifies(&msg, &good), "{len}");
            let mut bad = good.clone();
            bad[len % 32] ^= 1;
            assert!(!secret.verifies(&msg, &bad), "{len}");
            assert!(!secret.verifies(&msg, &good[..31]), "{len}");
        }
    }

    #[test]
    fn key_of_31_bytes_is_too_short() {
        assert_eq!(
            Secret::new(&[7u8; 31]).unwrap_err(),
            KeyError::TooShort { len: 31 }
        );
    }

    #[test]
    fn key_of_32_bytes_is_accepted() {
        assert!(Secret::new(&[7u8; 32]).is_ok());
    }

    #[test]
    fn normalised_key_gives_the_rfc_2104_mac_for_32_64_and_100_byte_keys() {
        for len in [32usize, 64, 100] {
            let key: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let secret = Secret::new(&key).unwrap();
            assert_eq!(
                tag(&secret, b"payload"),
                reference_tag(&key, b"payload"),
                "{len}"
            );
        }
    }

    #[test]
    fn debug_output_hides_the_key() {
        let keys = SecretKeys::single(Secret::new(KEY_A).unwrap());
        let shown = format!("{keys:?}");
        assert!(!shown.contains("0123456789"), "{shown}");
        assert!(shown.contains("redacted"));
    }

    #[test]
    fn file_with_one_line_has_no_previous_key() {
        let keys = SecretKeys::from_file_contents(KEY_A).unwrap();
        assert_eq!(tag(&keys.current, b"m"), reference_tag(KEY_A, b"m"));
        assert!(keys.previous.is_none());
    }

    #[test]
    fn file_with_trailing_newline_is_accepted() {
        let keys = SecretKeys::from_file_contents(b"0123456789abcdef0123456789abcdef\n").unwrap();
        assert_eq!(tag(&keys.current, b"m"), reference_tag(KEY_A, b"m"));
    }

    #[test]
    fn file_with_two_crlf_lines_has_current_then_previous() {
        let file = [KEY_A, b"\r\n", KEY_B, b"\r\n"].concat();
        let keys = SecretKeys::from_file_contents(&file).unwrap();
        assert_eq!(tag(&keys.current, b"m"), reference_tag(KEY_A, b"m"));
        let previous = keys.previous.unwrap();
        assert_eq!(tag(&previous, b"m"), reference_tag(KEY_B, b"m"));
    }

    #[test]
    fn empty_file_is_refused() {
        for file in [&b""[..], b"\n", b"\r\n"] {
            assert_eq!(
                SecretKeys::from_file_contents(file).unwrap_err(),
                KeyError::EmptyFile
            );
        }
    }

    #[test]
    fn blank_first_line_is_refused_by_number() {
        let file = [b"\n", KEY_A].concat();
        assert_eq!(
            SecretKeys::from_file_contents(&file).unwrap_err(),
            KeyError::BlankLine { line: 1 }
        );
    }

    #[test]
    fn second_trailing_newline_is_a_blank_line_2() {
        let file = [KEY_A, b"\n\n"].concat();
        assert_eq!(
            SecretKeys::from_file_contents(&file).unwrap_err(),
            KeyError::BlankLine { line: 2 }
        );
    }

    #[test]
    fn three_lines_are_refused() {
        let file = [KEY_A, b"\n", KEY_B, b"\n", KEY_A].concat();
        assert_eq!(
            SecretKeys::from_file_contents(&file).unwrap_err(),
            KeyError::TooManyLines { lines: 3 }
        );
    }

    #[test]
    fn short_previous_key_is_refused_with_line_and_length() {
        let file = [KEY_A, b"\nshort-key\n"].concat();
        let err = SecretKeys::from_file_contents(&file).unwrap_err();
        assert_eq!(err, KeyError::LineTooShort { line: 2, len: 9 });
        assert_eq!(
            err.to_string(),
            "line 2 of the secret file is a 9-byte key, at least 32 bytes are required"
        );
    }
}
